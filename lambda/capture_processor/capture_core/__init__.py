"""Runtime code of the capture post-processing Lambda (stdlib, boto3, pyarrow; pyiceberg for the Iceberg tables)."""
