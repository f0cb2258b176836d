"""The stream reader: offsets and partitions over the receiver's WAL (:mod:`.stream_reader`),
its progress report and frame (:mod:`.progress_report`, :mod:`.progress_frame`) and the
Sparkplug planning and schema (:mod:`.sparkplug_plan`, :mod:`.sparkplug_schema`)."""
