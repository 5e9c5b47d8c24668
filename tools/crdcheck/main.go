// crdcheck validates our XRDs the way a real control plane would accept them:
// it converts each XRD into the CRD Crossplane generates for it, then runs the
// API server's own CRD validation, which checks that the schema is structural
// and compiles every x-kubernetes-validations rule against its estimated cost
// budget. `crossplane resource validate` checks manifests against a schema but
// not the schema itself, so an unbounded list under a CEL rule would otherwise
// surface only when a user installs the package.
//
//	crdcheck apis/*/definition.yaml
//
// Prints one line per XRD and every error; exits 1 when any XRD has errors.
package main

import (
	"context"
	"fmt"
	"os"

	xv1 "github.com/crossplane/crossplane/apis/v2/apiextensions/v1"
	"github.com/crossplane/crossplane-runtime/v2/pkg/xcrd"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"sigs.k8s.io/yaml"
)

func check(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The v1 type carries every field our v2 XRDs use (scope, scale);
	// Crossplane generates the CRD from it the same way.
	xrd := &xv1.CompositeResourceDefinition{}
	if err := yaml.Unmarshal(b, xrd); err != nil {
		return 0, fmt.Errorf("cannot parse %s: %w", path, err)
	}
	xrd.SetUID("00000000-0000-0000-0000-000000000000")
	crd, err := xcrd.ForCompositeResource(xrd)
	if err != nil {
		return 0, fmt.Errorf("cannot derive the CRD of %s: %w", path, err)
	}
	extv1.SetObjectDefaults_CustomResourceDefinition(crd)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := extv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
		return 0, err
	}
	errs := validation.ValidateCustomResourceDefinition(context.Background(), internal)
	fmt.Printf("%s: %d errors\n", path, len(errs))
	for _, e := range errs {
		fmt.Println("  ", e.Error())
	}
	return len(errs), nil
}

func main() {
	bad := 0
	for _, path := range os.Args[1:] {
		n, err := check(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "crdcheck:", err)
			os.Exit(2)
		}
		bad += n
	}
	if bad > 0 {
		os.Exit(1)
	}
}
