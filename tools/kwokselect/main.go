// Command kwokselect evaluates kwok Stage selectors with kwok's own code, so a
// unit test can prove which pods a stage file selects (tests/test_pods_stages.py).
//
//	kwokselect STAGE.yaml... < objects.json
//
// objects.json is a JSON array of objects (Pods); the output is a JSON object
// mapping each stage's metadata.name to a list of booleans, one per object: does
// every matchExpression of the stage's selector match it, as kwok decides.
// Built by hack/build-go-tool.sh kwokselect; kwok is pinned as hack/tools/kwok pins it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	"sigs.k8s.io/kwok/pkg/utils/expression"
	"sigs.k8s.io/yaml"
)

type stage struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchExpressions []struct {
				Key      string   `json:"key"`
				Operator string   `json:"operator"`
				Values   []string `json:"values"`
			} `json:"matchExpressions"`
		} `json:"selector"`
	} `json:"spec"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kwokselect:", err)
		os.Exit(1)
	}
}

func run() error {
	var objects []any
	if err := json.NewDecoder(os.Stdin).Decode(&objects); err != nil {
		return fmt.Errorf("reading objects: %w", err)
	}
	out := map[string][]bool{}
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var s stage
		if err := yaml.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		var reqs []*expression.Requirement
		for _, e := range s.Spec.Selector.MatchExpressions {
			r, err := expression.NewRequirement(e.Key, internalversion.SelectorOperator(e.Operator), e.Values)
			if err != nil {
				return fmt.Errorf("%s: key %q: %w", path, e.Key, err)
			}
			reqs = append(reqs, r)
		}
		for _, obj := range objects {
			ok := true
			for _, r := range reqs {
				m, err := r.Matches(context.Background(), obj)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				ok = ok && m
			}
			out[s.Metadata.Name] = append(out[s.Metadata.Name], ok)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
