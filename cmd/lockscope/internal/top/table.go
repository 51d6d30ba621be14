package top

import "strings"

// A pane's content: rows of laid-out text, some of them selectable (a key
// to open or act on), some headings. Selection is by row id, so it stays
// on the same lock when a refresh reorders or adds rows.

// row is one line of a pane.
type row struct {
	id      string // identity across refreshes; "" for a heading or plain text
	key     string // the lock Enter and the actions use; "" for none
	line    string // the laid-out text, without the selection marker
	tone    tone
	heading bool
}

func (r row) selectable() bool { return r.id != "" }

// table is a pane's rows under an optional header of column titles.
type table struct {
	header string
	rows   []row
	empty  string // what to say when there are no rows
	note   string // a line under the rows (what is left out)
}

// column is one column of a layout: a fixed width, or a share (flex) of
// what the fixed ones leave, never under min nor over max.
type column struct {
	title string
	width int // fixed width; 0 for a flexible column
	flex  int // share of the rest for a flexible column
	min   int
	max   int // a flexible column's widest; 0 for no limit
	right bool
}

// marker is the width of the selection marker before every row.
const marker = 2

// widths lays cols out in width columns (the marker excluded), one space
// between columns.
func widths(cols []column, width int) []int {
	out := make([]int, len(cols))
	rest := width - marker - (len(cols) - 1)
	flex := 0
	for i, c := range cols {
		if c.width > 0 {
			out[i] = c.width
			rest -= c.width
		} else {
			flex += c.flex
			rest -= c.min
			out[i] = c.min
		}
	}
	if rest > 0 && flex > 0 {
		given := 0
		last := -1
		for i, c := range cols {
			if c.width == 0 {
				add := rest * c.flex / flex
				out[i] += add
				given += add
				last = i
			}
		}
		out[last] += rest - given
	}
	for i, c := range cols {
		if c.width == 0 && c.max > 0 {
			out[i] = min(out[i], c.max) // a wide screen leaves room on the right rather than far-apart columns
		}
	}
	return out
}

// layout lays cells out in the widths of cols.
func layout(cols []column, w []int, cells []string) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		s := ""
		if i < len(cells) {
			s = cells[i]
		}
		b.WriteString(fit(s, w[i], c.right))
	}
	return strings.TrimRight(b.String(), " ")
}

// header lays out the column titles.
func header(cols []column, w []int) string {
	titles := make([]string, len(cols))
	for i, c := range cols {
		titles[i] = c.title
	}
	return layout(cols, w, titles)
}
