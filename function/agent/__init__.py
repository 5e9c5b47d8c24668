"""What runs on every workload cluster: the inventory agent (`function-model-serving
inventory`, inventory.py), which reports the cluster's Nodes and published devices
per pool into a ConfigMap the control plane reads back (cluster/reporter.py)."""
