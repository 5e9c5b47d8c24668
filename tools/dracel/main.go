// Command dracel evaluates DRA device-selector CEL expressions with the real
// Kubernetes library (k8s.io/dynamic-resource-allocation/cel), so that the
// Python implementation in function/contract/devicecel/ can be checked against it
// (tests/test_devicecel.py).
//
// Input (stdin): {"cases": [{"id": "...", "expression": "...", "device": {...}}]}
// where device uses the InferenceCluster API shape:
//
//	{"driver": "gpu.nvidia.com",
//	 "attributes": {"productName": {"string": "H100"}, "dra.net/rdma": {"bool": true}},
//	 "capacity":   {"memory": {"value": "80Gi"}}}
//
// Attribute and capacity entries have the same JSON shape as
// resource.k8s.io/v1 DeviceAttribute and DeviceCapacity, so they decode
// straight into the Kubernetes types (quantities parse like in the API server).
//
// Output (stdout): one JSON object per case, in input order:
//
//	{"id": "...", "result": true}
//	{"id": "...", "error": "compile"|"runtime", "message": "..."}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

type device struct {
	Driver     string                                                    `json:"driver"`
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
}

type testCase struct {
	ID         string          `json:"id"`
	Expression string          `json:"expression"`
	Device     json.RawMessage `json:"device"`
}

type outcome struct {
	ID      string `json:"id"`
	Result  *bool  `json:"result,omitempty"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

func evaluate(c testCase) outcome {
	// Compile exactly as the scheduler does: default options, i.e. the
	// "stored expressions" environment and the DRA runtime cost limit.
	compiled := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(c.Expression, dracel.Options{})
	if compiled.Error != nil {
		return outcome{ID: c.ID, Error: "compile", Message: compiled.Error.Error()}
	}
	var d device
	if err := json.Unmarshal(c.Device, &d); err != nil {
		// Invalid device data (e.g. a malformed quantity) cannot be evaluated.
		return outcome{ID: c.ID, Error: "runtime", Message: "invalid device: " + err.Error()}
	}
	matches, _, err := compiled.DeviceMatches(context.Background(), dracel.Device{
		Driver:     d.Driver,
		Attributes: d.Attributes,
		Capacity:   d.Capacity,
	})
	if err != nil {
		return outcome{ID: c.ID, Error: "runtime", Message: err.Error()}
	}
	return outcome{ID: c.ID, Result: &matches}
}

func main() {
	var input struct {
		Cases []testCase `json:"cases"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&input); err != nil {
		fmt.Fprintf(os.Stderr, "dracel: reading cases from stdin: %v\n", err)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	for _, c := range input.Cases {
		if err := out.Encode(evaluate(c)); err != nil {
			fmt.Fprintf(os.Stderr, "dracel: writing result: %v\n", err)
			os.Exit(2)
		}
	}
}
