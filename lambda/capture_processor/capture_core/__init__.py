"""Runtime code of the capture post-processing Lambda (stdlib, boto3 and pyarrow only)."""
