package deploytest

// Rendering of the k8s/ kustomizations with the kustomize API, and the few
// Kubernetes object fields the deployment tests compare.

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

type object struct {
	Kind     string            `json:"kind"`
	Metadata meta              `json:"metadata"`
	Data     map[string]string `json:"data"`
	Spec     json.RawMessage   `json:"spec"`
}

type meta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

type statefulSet struct {
	ServiceName string `json:"serviceName"`
	Selector    struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Template struct {
		Metadata meta    `json:"metadata"`
		Spec     podSpec `json:"spec"`
	} `json:"template"`
	VolumeClaimTemplates []struct {
		Metadata meta `json:"metadata"`
		Spec     struct {
			AccessModes []string `json:"accessModes"`
		} `json:"spec"`
	} `json:"volumeClaimTemplates"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot *bool  `json:"runAsNonRoot"`
		RunAsUser    *int64 `json:"runAsUser"`
		FSGroup      *int64 `json:"fsGroup"`
	} `json:"securityContext"`
	Containers []container `json:"containers"`
	Volumes    []struct {
		Name                  string          `json:"name"`
		PersistentVolumeClaim json.RawMessage `json:"persistentVolumeClaim"`
	} `json:"volumes"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Args    []string `json:"args"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `json:"name"`
		} `json:"configMapRef"`
	} `json:"envFrom"`
	Env []struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `json:"fieldPath"`
			} `json:"fieldRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	StartupProbe   *probe `json:"startupProbe"`
	ReadinessProbe *probe `json:"readinessProbe"`
	LivenessProbe  *probe `json:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `json:"requests"`
	} `json:"resources"`
	SecurityContext struct {
		ReadOnlyRootFilesystem   *bool `json:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string          `json:"path"`
		Port json.RawMessage `json:"port"`
	} `json:"httpGet"`
	PeriodSeconds    int `json:"periodSeconds"`
	FailureThreshold int `json:"failureThreshold"`
}

type service struct {
	ClusterIP string            `json:"clusterIP"`
	Selector  map[string]string `json:"selector"`
	Ports     []struct {
		Name       string          `json:"name"`
		Port       int             `json:"port"`
		TargetPort json.RawMessage `json:"targetPort"`
	} `json:"ports"`
}

type pdb struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
}

// rendered is one overlay built by kustomize, indexed by kind and name.
type rendered map[string]map[string]object

func render(t *testing.T, dir string) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := rendered{}
	for _, r := range rm.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: marshal %s: %v", dir, r.CurId(), err)
		}
		var o object
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatalf("%s: decode %s: %v", dir, r.CurId(), err)
		}
		if out[o.Kind] == nil {
			out[o.Kind] = map[string]object{}
		}
		out[o.Kind][o.Metadata.Name] = o
	}
	return out
}

func (r rendered) spec(t *testing.T, kind, name string, into any) {
	t.Helper()
	o, ok := r[kind][name]
	if !ok {
		t.Fatalf("no %s %q rendered (have %v)", kind, name, names(r[kind]))
	}
	if err := json.Unmarshal(o.Spec, into); err != nil {
		t.Fatalf("%s %s: decode spec: %v", kind, name, err)
	}
}

func names(m map[string]object) []string {
	return slices.Sorted(maps.Keys(m))
}

// selects reports whether every selector label is on the pod.
func selects(selector, pod map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if pod[k] != v {
			return false
		}
	}
	return true
}

// portOf resolves a probe or Service target port (a number or the name of
// a container port) to a number.
func portOf(t *testing.T, raw json.RawMessage, c container) int {
	t.Helper()
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		return n
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		t.Fatalf("port %s: neither number nor name", raw)
	}
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("port name %q is not a port of container %s", name, c.Name)
	return 0
}
