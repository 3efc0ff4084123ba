"""Package data: the capture processor's Lambda runtime (``handler.handler``), deployed by
:class:`hyperpod_inference_iac.CapturePipeline` as a folder asset. Lambda imports ``handler`` and
``capture_core`` as top-level modules from this folder; nothing imports this package itself."""
