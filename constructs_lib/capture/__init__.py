"""Captured inference data: where it is kept, how it is processed, and how it is queried.

``capture_storage`` (the KMS-encrypted capture bucket, its access log bucket and lifecycle, the readers),
``capture_pipeline`` (the processor Lambda that turns raw captures into redacted, attributed rows) and
``capture_tables`` (the Iceberg tables, Lake Formation column grants and Athena workgroups) and ``gpu_cost`` (the
hourly GPU node-hour sampler of the cost per team, writing one of those tables). The processor's own code ships as
``hyperpod_inference_iac.capture_processor``, the sampler's with it (``node_hours_sampler``: one asset, the same
key-naming file IO; runtime code, no CDK).

Layering: imports the foundation and security; never the cluster, serving or observability.
"""
