"""Data pipelines that run on Korvet through Spark's own Kafka connector.

``windowed_aggregates`` is the shipped Spark Structured Streaming pipeline (JSON
events in, windowed aggregates out to Parquet and to a Korvet topic);
``spark_session`` builds the local SparkSession it runs in; ``cli`` is
``korvet pipeline``. See docs/spark.md.
"""
