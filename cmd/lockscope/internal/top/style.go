package top

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// styles are the view's styles, written for one colour profile: with
// termenv.Ascii every style renders plain text, so NO_COLOR output carries
// no escape sequence at all (the selection is still marked with ">").
type styles struct {
	r                        *lipgloss.Renderer
	title, dim, head, tabOn  lipgloss.Style
	sel, bad, warn, good     lipgloss.Style
	bannerBad, bannerWarn    lipgloss.Style
	flashGood, flashBad, box lipgloss.Style
}

func newStyles(p termenv.Profile) styles {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(p)
	r.SetHasDarkBackground(true) // never ask the terminal: that query can hang over SSH
	return styles{
		r:          r,
		title:      r.NewStyle().Bold(true),
		dim:        r.NewStyle().Foreground(lipgloss.Color("245")),
		head:       r.NewStyle().Bold(true).Underline(true),
		tabOn:      r.NewStyle().Bold(true).Reverse(true),
		sel:        r.NewStyle().Reverse(true),
		bad:        r.NewStyle().Foreground(lipgloss.Color("203")),
		warn:       r.NewStyle().Foreground(lipgloss.Color("214")),
		good:       r.NewStyle().Foreground(lipgloss.Color("114")),
		bannerBad:  r.NewStyle().Bold(true).Foreground(lipgloss.Color("231")).Background(lipgloss.Color("160")),
		bannerWarn: r.NewStyle().Bold(true).Foreground(lipgloss.Color("16")).Background(lipgloss.Color("214")),
		flashGood:  r.NewStyle().Foreground(lipgloss.Color("114")).Bold(true),
		flashBad:   r.NewStyle().Foreground(lipgloss.Color("203")).Bold(true),
		box:        r.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1),
	}
}

// tone is how a row or a figure asks for attention.
type tone int

const (
	toneNone tone = iota
	toneWarn
	toneBad
	toneGood
	toneDim
)

func (s styles) tone(t tone) lipgloss.Style {
	switch t {
	case toneWarn:
		return s.warn
	case toneBad:
		return s.bad
	case toneGood:
		return s.good
	case toneDim:
		return s.dim
	}
	return s.r.NewStyle()
}
