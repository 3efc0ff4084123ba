"""The cluster: network, EKS with its add-ons and GPU node groups on local NVMe, the HyperPod cluster attached to
it, and the HyperPod inference operator.

``network`` (the VPC and its endpoints), ``eks_cluster`` (``InferenceCluster`` and its add-ons, ``addons``),
``node_launch_template`` and ``gpu_nodegroup`` (GPU node groups whose instance store becomes the NVMe cache),
``hyperpod_cluster`` (the ``AWS::SageMaker::Cluster``, its execution role and lifecycle scripts in
``hyperpod_lifecycle/``), ``inference_operator`` (the add-on, its roles and configuration) and
``alb_controller_policy``.

Layering: imports the foundation, the charts and security; never capture, serving or observability.
"""
