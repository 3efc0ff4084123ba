"""What the platform's operators watch: alarms, their topic and the dashboard.

``alarm_topic`` (the encrypted SNS topic), ``alarms`` (alarm settings as props, one table of every alarm),
``capture_alarms``, ``certificate_alarms``, ``sidecar_metrics`` (the capture sidecars' metrics agent),
``model_metrics`` (what model users feel: error rate, latency, time to first token), ``platform_dashboard`` and
``alarm_review`` (how ``make review`` reads alarms).

Layering: the top of the library: imports every other part, and nothing imports it but the package root.
"""
