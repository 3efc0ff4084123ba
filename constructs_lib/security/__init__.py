"""Security building blocks the constructs share: who may touch what.

S3 access statements and the data perimeter (``s3_access``, ``data_perimeter``), the hardened bucket every bucket
of the library is made from (``hardened_bucket``), the secrets' customer key (``secrets_key``), workload identities
(IRSA and EKS Pod Identity roles bound to one service account, ``workload_identity``) and the CI deploy role
(``github_deploy_role``).

Layering: imports the foundation and the charts (a workload identity is derived from the plan); the cluster,
capture, serving and observability parts import it.
"""
