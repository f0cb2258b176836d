"""The writer: rows of a DataFrame published to a broker (:mod:`.sink`), its options
(:mod:`.options`), the rows read into messages (:mod:`.rows`) and one task's publishing
(:mod:`.task`)."""
