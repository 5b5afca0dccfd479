package bench

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
)

// series is one library's line on a panel: y per x position (NaN or <= 0:
// no point there).
type series struct {
	name string
	ys   []float64
}

// panel is one chart: x positions 0..len(xLabels)-1, evenly spaced (so
// 1, 2, 4, ... 64 make a log-2 axis), and a log-10 y axis.
type panel struct {
	title, xTitle, yTitle string
	xLabels               []string
	lines                 []series
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

const (
	panelW, panelH                     = 380, 290
	marginL, marginR, marginT, marginB = 62, 26, 30, 82
)

// writeSVG draws panels in a grid of cols columns into path.
func writeSVG(path, title string, cols int, panels []panel) error {
	rows := (len(panels) + cols - 1) / cols
	w, h := cols*panelW, rows*panelH+34
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", w/2, html.EscapeString(title))
	for i, p := range panels {
		x0, y0 := (i%cols)*panelW, 34+(i/cols)*panelH
		drawPanel(&b, p, float64(x0), float64(y0))
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func drawPanel(b *strings.Builder, p panel, ox, oy float64) {
	pl, pt := ox+marginL, oy+marginT
	pw, ph := float64(panelW-marginL-marginR), float64(panelH-marginT-marginB)
	// The y range: whole decades around the data.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range p.lines {
		for _, y := range s.ys {
			if y > 0 && !math.IsNaN(y) && !math.IsInf(y, 0) {
				lo, hi = math.Min(lo, y), math.Max(hi, y)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	n := len(p.xLabels)
	xAt := func(i int) float64 {
		if n == 1 {
			return pl + pw/2
		}
		return pl + pw*float64(i)/float64(n-1)
	}
	yAt := func(y float64) float64 { return pt + ph - ph*(math.Log10(y)-dlo)/(dhi-dlo) }

	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13" text-anchor="middle">%s</text>`+"\n", pl+pw/2, oy+18, html.EscapeString(p.title))
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", pl, pt, pw, ph)
	// y ticks: 1, 2, 5 of every decade, labelled at each decade.
	for d := dlo; d <= dhi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if math.Log10(v) > dhi+1e-9 {
				break
			}
			y := yAt(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", pl-5, y+4, tickLabel(v))
			}
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", pl, y, pl+pw, y, stroke)
		}
	}
	for i, l := range p.xLabels {
		x := xAt(i)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, pt, x, pt+ph)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, pt+ph+14, html.EscapeString(l))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", pl+pw/2, pt+ph+30, html.EscapeString(p.xTitle))
	fmt.Fprintf(b, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", ox+14, pt+ph/2, html.EscapeString(p.yTitle))
	for k, s := range p.lines {
		color := palette[k%len(palette)]
		var pts []string
		flush := func() {
			if len(pts) > 1 {
				fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for i, y := range s.ys {
			if !(y > 0) || math.IsInf(y, 0) {
				flush()
				continue
			}
			x, yy := xAt(i), yAt(y)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, yy))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", x, yy, color)
		}
		flush()
		// The legend, under the x axis title.
		lx, ly := pl+float64(k%2)*pw/2, pt+ph+46+float64(k/2)*14
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", lx, ly-4, lx+18, ly-4, color)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+22, ly, html.EscapeString(s.name))
	}
}

// tickLabel writes a power of ten briefly: 0.01, 1, 100, 10k, 1M.
func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	default:
		return fmt.Sprintf("%g", v)
	}
}
