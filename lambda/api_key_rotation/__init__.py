"""Package data: the rotation function of the portable model servers' API keys (``rotation.handler``), deployed by
:class:`hyperpod_inference_iac.ApiKeySync` as a folder asset. Lambda imports ``rotation`` as a top-level module from
this folder; nothing imports this package itself."""
