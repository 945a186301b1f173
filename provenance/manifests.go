package provenance

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"

	"gopkg.in/yaml.v3"
)

// podSpecLists are the keys of a pod spec whose entries run an image.
var podSpecLists = []string{"initContainers", "containers", "ephemeralContainers"}

// ImageRefs returns every image reference that rendered Kubernetes
// manifests (a multi-document YAML stream, as `helm template` or a Helm
// release's manifest gives) would run: the image of every container, init
// container and ephemeral container of any object, wherever its pod spec
// sits (a Pod, a Deployment's or DaemonSet's template, a CronJob's job
// template). Each reference appears once, sorted. A document that is not
// YAML is an error; an object without containers contributes nothing.
func ImageRefs(manifests []byte) ([]string, error) {
	seen := map[string]bool{}
	dec := yaml.NewDecoder(bytes.NewReader(manifests))
	for n := 1; ; n++ {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("manifest document %d: %w", n, err)
		}
		if err := collectImages(doc, seen); err != nil {
			return nil, fmt.Errorf("manifest document %d: %w", n, err)
		}
	}
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out, nil
}

// collectImages walks v and records the image of every container list
// entry it finds.
func collectImages(v any, seen map[string]bool) error {
	switch t := v.(type) {
	case map[string]any:
		for _, key := range podSpecLists {
			list, ok := t[key].([]any)
			if !ok {
				continue
			}
			for i, c := range list {
				cm, ok := c.(map[string]any)
				if !ok {
					continue
				}
				img, present := cm["image"]
				if !present {
					continue
				}
				s, ok := img.(string)
				if !ok || s == "" {
					return fmt.Errorf("%s[%d]: image %v is not a reference", key, i, img)
				}
				seen[s] = true
			}
		}
		for _, child := range t {
			if err := collectImages(child, seen); err != nil {
				return err
			}
		}
	case []any:
		for _, child := range t {
			if err := collectImages(child, seen); err != nil {
				return err
			}
		}
	}
	return nil
}
