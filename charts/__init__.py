"""cdk8s charts: the HyperPod Inference Operator's custom resources and a portable model server."""
