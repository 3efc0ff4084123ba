"""Package data: the capture sidecar's image build context (``Dockerfile``, ``requirements.lock``,
``capture_sidecar/``), staged by the workloads construct as a Docker image asset and built at
deploy time. The image runs ``python -m capture_sidecar``; nothing imports this package itself."""
