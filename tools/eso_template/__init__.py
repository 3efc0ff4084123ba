"""``python -m tools.eso_template``: render the API keys file template of a server with several callers with Go's own
``text/template`` (``render.go``), as External Secrets' engine v2 does, and compare it with what the tests' sync
emulation (``tests/support/rotation.py``) writes. Needs ``go`` on PATH (Debian: ``apt-get install golang-go``);
not part of ``make test``: docs/secrets.md records its result."""
