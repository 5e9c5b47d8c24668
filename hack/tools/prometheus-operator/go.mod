module fms/tools/prometheus-operator

go 1.24.0

// The Prometheus Operator's PodMonitor CRD (example/prometheus-operator-crd of the
// module), vendored into crds/prometheus-operator by hack/vendor_crds.py for
// validating the PodMonitor an InferenceCluster composes when it opts in
// (spec.monitoring.podMonitor); nothing is built.
require github.com/prometheus-operator/prometheus-operator v0.85.0
