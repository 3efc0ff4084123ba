"""`make review`: what a change does to the synthesized platform, in the words a reviewer asks in.

The base (a git ref, checked out in a temporary worktree) and the working tree are each synthesized
offline into temporary directories; CloudFormation is compared by the CDK's own diff engine
(``cdk diff --template <base template> --app <head assembly>``), the Kubernetes manifests of ``dist/``
by kind/namespace/name; both are then read for what a reviewer asks about (identity, encryption,
exposure, DNS and TLS, data governance, workloads, alarms) and everything else is counted. See
docs/review.md.
"""
