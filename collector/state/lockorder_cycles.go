package state

import (
	"cmp"
	"slices"
	"strings"
)

// Finding the lock-order inversions: the cycles of the class graph.
//
// A graph can hold exponentially many cycles; the inversions reported are,
// for every edge that lies on a cycle, the shortest cycle through it (each
// once, at most maxInversions): every order that takes part in an
// inversion is shown in one, and an A ⇄ B pair is always its own two-class
// inversion. Strongly connected components (Tarjan) tell which edges lie
// on a cycle; a breadth-first search inside the component finds the
// shortest way back. With at most MaxOrderEdges edges that is some
// millions of steps, and it runs only when an edge appears or ages out.

// findCycles returns the inversions of the graph, each from its smallest
// class, shortest first, then in class order.
func findCycles(edges map[orderPair]*orderEdge) [][]string {
	adj := make(map[string][]string)
	for p := range edges {
		adj[p.from] = append(adj[p.from], p.to)
		if _, ok := adj[p.to]; !ok {
			adj[p.to] = nil
		}
	}
	nodes := make([]string, 0, len(adj))
	for n, out := range adj {
		slices.Sort(out)
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	comp := components(nodes, adj)

	seen := make(map[string]bool)
	var out [][]string
	for _, u := range nodes {
		for _, v := range adj[u] {
			if comp[u] != comp[v] {
				continue
			}
			c := shortestBack(u, v, adj, comp)
			if c == nil {
				continue
			}
			lo := slices.Index(c, slices.Min(c))
			c = append(c[lo:], c[:lo]...)
			id := strings.Join(c, "\x00")
			if seen[id] {
				continue
			}
			seen[id] = true
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b []string) int {
		if c := cmp.Compare(len(a), len(b)); c != 0 {
			return c
		}
		return slices.Compare(a, b)
	})
	if len(out) > maxInversions {
		out = out[:maxInversions]
	}
	return out
}

// shortestBack returns the cycle u → v → … → u of fewest classes inside
// their component, as [u, v, …], or nil if there is none.
func shortestBack(u, v string, adj map[string][]string, comp map[string]int) []string {
	if u == v {
		return nil
	}
	prev := map[string]string{v: ""}
	queue := []string{v}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, m := range adj[n] {
			if comp[m] != comp[u] {
				continue
			}
			if _, ok := prev[m]; ok {
				continue
			}
			prev[m] = n
			if m == u {
				var back []string // v … n, reversed
				for x := n; x != ""; x = prev[x] {
					back = append(back, x)
				}
				slices.Reverse(back)
				return append([]string{u}, back...)
			}
			queue = append(queue, m)
		}
	}
	return nil
}

// components numbers the strongly connected components of the graph
// (Tarjan's algorithm, iterative so that a long chain of classes cannot
// exhaust the stack).
func components(nodes []string, adj map[string][]string) map[string]int {
	index := make(map[string]int, len(nodes))
	low := make(map[string]int, len(nodes))
	on := make(map[string]bool)
	comp := make(map[string]int, len(nodes))
	var stack []string
	next, ncomp := 0, 0
	type frame struct {
		n string
		i int // next successor to visit
	}
	for _, root := range nodes {
		if _, ok := index[root]; ok {
			continue
		}
		calls := []frame{{n: root}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		on[root] = true
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			if f.i < len(adj[f.n]) {
				m := adj[f.n][f.i]
				f.i++
				if _, ok := index[m]; !ok {
					index[m], low[m] = next, next
					next++
					stack = append(stack, m)
					on[m] = true
					calls = append(calls, frame{n: m})
				} else if on[m] {
					low[f.n] = min(low[f.n], index[m])
				}
				continue
			}
			n := f.n
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				p := calls[len(calls)-1].n
				low[p] = min(low[p], low[n])
			}
			if low[n] == index[n] {
				for {
					m := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					on[m] = false
					comp[m] = ncomp
					if m == n {
						break
					}
				}
				ncomp++
			}
		}
	}
	return comp
}
