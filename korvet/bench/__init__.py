"""`korvet bench`: produce and consume throughput and latency, side by side.

Three kinds of run, one broker at a time (the machine has two cores):

- the **ceiling**: the same records appended straight to Redis through the broker's
  own append script (``RedisStore.append``) from one Python process, and read back
  with ``RedisStore.read`` (korvet/bench/ceiling.py);
- **Korvet** (embedded Redis with AOF everysec, and with persistence off) driven by
  real clients: Kafka's ProducerPerformance and ConsumerPerformance (Java) and
  librdkafka through confluent-kafka (korvet/bench/rdkafka_perf.py);
- **Apache Kafka** started locally, driven by the same clients.

The runner (korvet/bench/runner.py) collects every run; korvet/bench/summary.py turns
them into medians, spreads, ratios and verdicts; report.py prints the table and renders
the markdown of docs/performance.md; plots.py draws the PNGs.
"""
