"""Capture sidecar: a transparent reverse proxy in front of a model server (vLLM, TGI, SGLang)
that writes sampled request/response payloads to S3 in the SageMaker data-capture envelope."""

__version__ = "0.1.0"
