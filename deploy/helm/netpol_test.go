package helm

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// peer is a pod that may try to reach lockscope's port: its namespace (and
// that namespace's labels) and its own labels.
type peer struct {
	name      string
	namespace string
	nsLabels  map[string]string
	labels    map[string]string
}

// admits reports whether np lets p in on port (a named or numbered port of
// the pod), as Kubernetes reads a NetworkPolicy whose selectors use
// matchLabels only: a pod np selects admits what some ingress rule's ports
// and peers admit; a peer without a namespaceSelector is of np's namespace.
func admits(t *testing.T, np *networkingv1.NetworkPolicy, p peer, port string) bool {
	t.Helper()
	for _, r := range np.Spec.Ingress {
		portOK := len(r.Ports) == 0
		for _, rp := range r.Ports {
			if rp.Port != nil && rp.Port.String() == port {
				portOK = true
			}
		}
		if !portOK {
			continue
		}
		if len(r.From) == 0 {
			return true
		}
		for _, f := range r.From {
			if f.IPBlock != nil {
				continue
			}
			nsOK := f.NamespaceSelector == nil && p.namespace == np.Namespace || f.NamespaceSelector != nil && selects(t, f.NamespaceSelector, p.nsLabels)
			podOK := f.PodSelector == nil || selects(t, f.PodSelector, p.labels)
			if nsOK && podOK {
				return true
			}
		}
	}
	return false
}

func selects(t *testing.T, s *metav1.LabelSelector, labels map[string]string) bool {
	t.Helper()
	if len(s.MatchExpressions) > 0 {
		t.Fatalf("selector %v: matchExpressions are not evaluated here", s)
	}
	for k, v := range s.MatchLabels { // an empty selector selects all
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestNetworkPolicy: by default only pods labelled lockscope-client in the
// release's namespace and Prometheus's pods reach the dashboard's port;
// any other pod, in the namespace or not, is refused (before, the chart
// had no NetworkPolicy: any pod read the dashboard anonymously). The
// policy selects the workload's pods and names its port. A list of peers
// replaces the default; an empty one lets nothing in; disabled, none.
func TestNetworkPolicy(t *testing.T) {
	o := render(t, "lockscope", variants["defaults"])
	np := o.netpol
	if np == nil {
		t.Fatal("no NetworkPolicy by default")
	}
	if !matches(np.Spec.PodSelector.MatchLabels, o.pod(t).Labels) || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("NetworkPolicy selects %v for Ingress (%v), want the workload's pods %v", np.Spec.PodSelector.MatchLabels, np.Spec.PolicyTypes, o.pod(t).Labels)
	}
	if p := o.container(t).Ports; len(p) != 1 || p[0].Name != "http" {
		t.Fatalf("container ports %v, want one named http", p)
	}
	ns := np.Namespace
	for _, c := range []struct {
		peer peer
		want bool
	}{
		{peer{"a client in the namespace", ns, map[string]string{"kubernetes.io/metadata.name": ns}, map[string]string{"lockscope-client": "true", "app": "toolbox"}}, true},
		{peer{"Prometheus in monitoring", "monitoring", map[string]string{"kubernetes.io/metadata.name": "monitoring"}, map[string]string{"app.kubernetes.io/name": "prometheus"}}, true},
		{peer{"any pod of the namespace", ns, map[string]string{"kubernetes.io/metadata.name": ns}, map[string]string{"app": "shop"}}, false},
		{peer{"a client label in another namespace", "other", map[string]string{"kubernetes.io/metadata.name": "other"}, map[string]string{"lockscope-client": "true"}}, false},
		{peer{"a pod of another namespace", "other", map[string]string{"kubernetes.io/metadata.name": "other"}, map[string]string{"app": "x"}}, false},
	} {
		if got := admits(t, np, c.peer, "http"); got != c.want {
			t.Errorf("%s: admitted %v, want %v", c.peer.name, got, c.want)
		}
		if admits(t, np, c.peer, "22") {
			t.Errorf("%s: admitted on port 22", c.peer.name)
		}
	}

	ingress := peer{"the ingress controller", "ingress-nginx", map[string]string{"kubernetes.io/metadata.name": "ingress-nginx"}, map[string]string{"app": "nginx"}}
	o = render(t, "lockscope", "networkPolicy:\n  from:\n    - namespaceSelector:\n        matchLabels:\n          kubernetes.io/metadata.name: ingress-nginx\n")
	if !admits(t, o.netpol, ingress, "http") || admits(t, o.netpol, peer{"Prometheus", "monitoring", nil, map[string]string{"app.kubernetes.io/name": "prometheus"}}, "http") {
		t.Errorf("with from: [ingress-nginx]: ingress %+v; want the ingress controller only", o.netpol.Spec.Ingress)
	}
	o = render(t, "lockscope", "networkPolicy:\n  from: []\n")
	if o.netpol == nil || len(o.netpol.Spec.Ingress) != 0 {
		t.Errorf("with from: []: %+v, want a policy that lets nothing in", o.netpol)
	}
	if o = render(t, "lockscope", "networkPolicy:\n  enabled: false\n"); o.netpol != nil {
		t.Error("networkPolicy.enabled=false still renders a NetworkPolicy")
	}
}
