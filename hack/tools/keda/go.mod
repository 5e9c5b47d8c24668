module fms/tools/keda

go 1.25.5

// KEDA's CRDs (config/crd/bases of the module), vendored into crds/keda by
// hack/vendor_crds.py for validating composed ScaledObjects; nothing is built.
require github.com/kedacore/keda/v2 v2.18.3
