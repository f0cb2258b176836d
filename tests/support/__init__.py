"""What the tests share, each helper once (CONTRIBUTING.md, "Layout"):

* ``ids``: names no other test uses (:func:`~tests.support.ids.unique_id`);
* ``waiting``: waits with deadlines, and a client's subscription in the broker's log;
* ``brokers``: Mosquitto brokers per test, test TLS material, the interop brokers' common face;
* ``paho_client``: a paho-mqtt client whose events can be awaited;
* ``publishing``: messages published and acknowledged, steady and paced traffic, a session
  made ahead with messages queued for it, our client's ``pub`` command;
* ``ledger``: numbered traffic recorded in a ledger, and the check of a table against it;
* ``hostile_broker``: a scripted broker that misbehaves on purpose;
* ``scripted_reads``: a stand-in for the receiver's MQTT client;
* ``spark_fixtures``: the ``spark`` and ``dirs`` fixtures (a pytest plugin);
* ``spark_streams``: ``format("mqtt")`` queries, waits on their tables, delivery assertions;
* ``ingest_job``: the ingest job run as a subprocess;
* ``spark_processes``: the wheel, fresh virtualenvs and Spark processes of their own;
* ``sparkplug_edge_nodes``: the Sparkplug edge nodes of others.

Tools the benchmarks use too are in ``devtools`` (brokers, the fault proxy, backlogs, Sparkplug
payloads); nothing here imports ``bench``.
"""
