"""Serving the models: the workloads on the cluster and how callers reach them.

``inference_workloads`` (applies the planned charts: operator custom resources and portable servers with their
capture sidecars), ``endpoint_domain`` (certificate and hosted zone), ``external_dns``, ``api_keys`` (API keys in
Secrets Manager, synced to the sidecars and rotated), ``hugging_face_token`` (the token's sync) and ``gitops``
(the same plan staged as manifests in ``dist/``).

Layering: imports the foundation, the charts and security; never the cluster, capture or observability.
"""
