package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The charts writeCharts writes, and docs/benchmarks.md links to, relative
// to the markdown file.
const (
	connectChartFile     = "bench-connect.png"
	clientBoundChartFile = "bench-clientbound.png"
	throughputChartFile  = "bench-throughput.png"
	scramChartFile       = "bench-scram.png"
)

const (
	pt         vg.Length = 1           // a typographic point, vg.Length's unit
	chartDPI             = 110         // pixels per inch of the PNGs
	chartWidth           = 9 * vg.Inch // width of every chart
	legendPad            = 12 * pt     // space around a legend drawn beside the panels
	barLabelSz           = 9 * pt      // font size of the figures printed at the bars
)

// writeCharts writes the PNG charts of r into dir: bench-connect.png
// (connections per second per peer, one panel per scenario 1-4),
// bench-clientbound.png (scenario 5's connections per second and client CPU
// per connection by client count), bench-throughput.png (scenario 4's
// MB/s) and bench-scram.png (scenario 8's connections per second and client
// CPU per connection by role and client count). A chart whose data r lacks is not written. It returns the base names
// of the files written, on error those written before it.
func writeCharts(dir string, r *Report) ([]string, error) {
	if r == nil {
		return nil, nil
	}
	charts := []struct {
		name string
		make func() (*vgimg.Canvas, error)
	}{
		{connectChartFile, func() (*vgimg.Canvas, error) { return connectChart(r.Connect) }},
		{clientBoundChartFile, func() (*vgimg.Canvas, error) { return clientCountChart(5, scenarioRows(r.Connect, 5)) }},
		{throughputChartFile, func() (*vgimg.Canvas, error) { return throughputChart(r.Throughput) }},
		{scramChartFile, func() (*vgimg.Canvas, error) { return clientCountChart(8, scenarioRows(r.Connect, 8)) }},
	}
	var written []string
	for _, ch := range charts {
		c, err := ch.make()
		if err != nil {
			return written, fmt.Errorf("chart %s: %w", ch.name, err)
		}
		if c == nil {
			continue
		}
		if err := savePNG(filepath.Join(dir, ch.name), c); err != nil {
			return written, err
		}
		written = append(written, ch.name)
	}
	return written, nil
}

// savePNG writes the canvas c as a PNG file at path.
func savePNG(path string, c *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	return nil
}

// connectChart draws bench-connect.png: one panel per scenario 1-4 that has
// a successful row, each a horizontal bar of connections per second per
// peer, pgconnector in blue and the others in grey. It returns nil when no
// scenario has data.
func connectChart(rows []ConnectResult) (*vgimg.Canvas, error) {
	scenarios := connectChartScenarios(rows)
	if len(scenarios) == 0 {
		return nil, nil
	}
	most := 0
	for _, n := range scenarios {
		most = max(most, len(scenarioRows(rows, n)))
	}
	// Every panel gets the height the busiest one needs, at least 2.5in.
	panelH := max(2.5*vg.Inch, vg.Inch+vg.Length(most)*22*pt)
	thickness := min(16*pt, (panelH-vg.Inch)/vg.Length(most)*0.7)

	plots := make([][]*plot.Plot, len(scenarios))
	for i, n := range scenarios {
		p, err := connectPanel(n, scenarioRows(rows, n), thickness)
		if err != nil {
			return nil, fmt.Errorf("scenario %d: %w", n, err)
		}
		plots[i] = []*plot.Plot{p}
	}
	img := newCanvas(chartWidth, panelH*vg.Length(len(scenarios)))
	dc := draw.New(img)
	drawGrid(plots, dc)
	return img, nil
}

// connectPanel makes the panel of connect scenario n: one horizontal bar per
// row, the first row at the top; a peer whose every connection failed is
// labelled so, with no bar.
func connectPanel(n int, rows []ConnectResult, thickness vg.Length) (*plot.Plot, error) {
	if len(rows) == 0 {
		return nil, errors.New("no successful rows")
	}
	p := newPlot(fmt.Sprintf("%d. %s", n, scenarioTitles[n]), true)
	p.X.Label.Text = "connections/s"
	multi := len(clientCounts(rows)) > 1
	labels := make([]string, len(rows))
	values := make([]float64, len(rows))
	for i, c := range rows {
		pos := len(rows) - 1 - i
		labels[pos] = c.Peer
		if multi {
			labels[pos] += ", " + clientsLabel(c.Clients)
		}
		if !connectOK(c) {
			labels[pos] += " (failed)"
		}
		values[pos] = finite(c.ConnsPerSec)
		bar, err := newBar([]float64{values[pos]}, float64(pos), thickness, 0, familyColor(c.Family))
		if err != nil {
			return nil, err
		}
		p.Add(bar)
	}
	if err := addBarLabels(p, values, 0, true); err != nil {
		return nil, err
	}
	p.NominalY(labels...)
	setValueRange(&p.X, values)
	return p, nil
}

// clientCountChart draws bench-clientbound.png from scenario 5's rows, or
// bench-scram.png from scenario 8's: two panels, connections per second and
// client CPU per connection, each with one group of bars per peer (and ticket
// or role) and one bar per client count. It returns nil when no row succeeded.
func clientCountChart(n int, rows []ConnectResult) (*vgimg.Canvas, error) {
	keys, counts, cells := pivotClients(okRows(rows))
	if len(keys) == 0 || len(counts) == 0 {
		return nil, nil
	}
	thickness := 11 * pt
	groupH := vg.Length(len(counts))*thickness + 10*pt
	panelH := max(2.5*vg.Inch, vg.Inch+vg.Length(len(keys))*groupH)

	leg := newLegend()
	panels := []struct {
		title, xlabel string
		value         func(ConnectResult) float64
	}{
		{fmt.Sprintf("%d. %s: connections per second", n, scenarioTitles[n]), "connections/s",
			func(c ConnectResult) float64 { return c.ConnsPerSec }},
		{fmt.Sprintf("%d. %s: client CPU per connection", n, scenarioTitles[n]), "client CPU µs per connection",
			func(c ConnectResult) float64 { return float64(c.CPU) / 1e3 }},
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := newPlot(pn.title, true)
		p.X.Label.Text = pn.xlabel
		series := make([][]float64, len(counts))
		for j, n := range counts {
			series[j] = make([]float64, len(keys))
			for k, key := range keys {
				if c, ok := cells[pivotKey{key, n}]; ok {
					series[j][len(keys)-1-k] = finite(pn.value(c))
				}
			}
		}
		bars, err := addGroupedBars(p, series, thickness, true)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			for j, n := range counts {
				leg.Add(clientsLabel(n), bars[j])
			}
		}
		p.NominalY(reversed(keys)...)
		setValueRange(&p.X, slices.Concat(series...))
		plots[i] = []*plot.Plot{p}
	}
	img := newCanvas(chartWidth, panelH*vg.Length(len(panels)))
	drawWithLegend(plots, leg, draw.New(img))
	return img, nil
}

// throughputChart draws bench-throughput.png: MB/s of scenario 4, one group
// of vertical bars per workload and one bar per peer and transport. It
// returns nil when no row moved data.
func throughputChart(rows []ThroughputResult) (*vgimg.Canvas, error) {
	if !hasThroughputData(rows) {
		return nil, nil
	}
	var workloads, series []string
	values := map[[2]string]float64{}
	for _, t := range rows {
		if !throughputOK(t) {
			continue
		}
		s := t.Peer + " " + t.Transport
		if !slices.Contains(workloads, t.Workload) {
			workloads = append(workloads, t.Workload)
		}
		if !slices.Contains(series, s) {
			series = append(series, s)
		}
		if _, dup := values[[2]string{t.Workload, s}]; !dup {
			values[[2]string{t.Workload, s}] = finite(t.MBPerSec)
		}
	}
	data := make([][]float64, len(series))
	for j, s := range series {
		data[j] = make([]float64, len(workloads))
		for k, w := range workloads {
			data[j][k] = values[[2]string{w, s}]
		}
	}
	leg := newLegend()

	// The bars share about 6in of width among the workloads.
	thickness := min(40*pt, 6*vg.Inch/vg.Length(len(workloads))*0.75/vg.Length(len(series)))
	p := newPlot("Scenario 4: throughput", false)
	p.Y.Label.Text = "MB/s"
	bars, err := addGroupedBars(p, data, thickness, false)
	if err != nil {
		return nil, err
	}
	for j, s := range series {
		leg.Add(s, bars[j])
	}
	p.NominalX(workloads...)
	setValueRange(&p.Y, slices.Concat(data...))
	img := newCanvas(chartWidth, 5*vg.Inch)
	drawWithLegend([][]*plot.Plot{{p}}, leg, draw.New(img))
	return img, nil
}

// addGroupedBars adds to p one bar chart per series, each value at the
// category of its index, the series side by side within a category (the
// first series on top, or on the left). It labels the bars with their values
// and returns the bar charts for a legend.
func addGroupedBars(p *plot.Plot, series [][]float64, thickness vg.Length, horizontal bool) ([]*plotter.BarChart, error) {
	m := len(series)
	bars := make([]*plotter.BarChart, m)
	for j, vs := range series {
		// Horizontal: the first series uppermost; vertical: leftmost.
		offset := (vg.Length(j) - vg.Length(m-1)/2) * thickness
		if horizontal {
			offset = -offset
		}
		bar, err := newBar(vs, 0, thickness, offset, seriesColor(j))
		if err != nil {
			return nil, err
		}
		bar.Horizontal = horizontal
		p.Add(bar)
		bars[j] = bar
		if thickness >= 8*pt {
			if err := addBarLabels(p, vs, offset, horizontal); err != nil {
				return nil, err
			}
		}
	}
	return bars, nil
}

// newBar returns a horizontal bar chart of values starting at
// category pos, without outlines.
func newBar(values []float64, pos float64, thickness, offset vg.Length, c color.Color) (*plotter.BarChart, error) {
	bar, err := plotter.NewBarChart(plotter.Values(values), thickness)
	if err != nil {
		return nil, fmt.Errorf("bar chart: %w", err)
	}
	bar.XMin = pos
	bar.Offset = offset
	bar.Horizontal = true
	bar.Color = c
	bar.LineStyle.Width = 0
	bar.LineStyle.Color = color.Transparent
	return bar, nil
}

// addBarLabels prints each non-zero value of values at the end of its bar:
// value i belongs to category i, offset across the category by offset.
func addBarLabels(p *plot.Plot, values []float64, offset vg.Length, horizontal bool) error {
	var xys plotter.XYs
	var labels []string
	for i, v := range values {
		if v <= 0 {
			continue
		}
		xy := plotter.XY{X: float64(i), Y: v}
		if horizontal {
			xy = plotter.XY{X: v, Y: float64(i)}
		}
		xys = append(xys, xy)
		labels = append(labels, barValue(v))
	}
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return fmt.Errorf("bar labels: %w", err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font.Size = barLabelSz
		if horizontal {
			l.TextStyle[i].XAlign, l.TextStyle[i].YAlign = text.XLeft, text.YCenter
		} else {
			l.TextStyle[i].XAlign, l.TextStyle[i].YAlign = text.XCenter, text.YBottom
		}
	}
	l.Offset = vg.Point{X: offset, Y: 3 * pt}
	if horizontal {
		l.Offset = vg.Point{X: 3 * pt, Y: offset + pt}
	}
	p.Add(l)
	return nil
}

// barValue formats a figure printed at a bar: whole numbers from 10 on,
// one decimal from 1, two significant digits below.
func barValue(v float64) string {
	switch {
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// newPlot returns a plot titled title, with plain tick labels and a light
// grid across the value axis: X for horizontal bars, Y for vertical ones.
func newPlot(title string, horizontal bool) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 12 * pt
	p.Title.Padding = 6 * pt
	p.X.Tick.Marker = plainTicks{}
	p.Y.Tick.Marker = plainTicks{}
	g := plotter.NewGrid()
	g.Horizontal.Color, g.Vertical.Color = color.Gray{Y: 0xd8}, nil
	if horizontal {
		g.Horizontal.Color, g.Vertical.Color = nil, color.Gray{Y: 0xd8}
	}
	p.Add(g)
	return p
}

// plainTicks places ticks as plot.DefaultTicks does, labelled without
// trailing zeros: "2500", not "2500.00".
type plainTicks struct{}

// Ticks returns the ticks between lo and hi.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if strings.Contains(t.Label, ".") && !strings.ContainsAny(t.Label, "eE") {
			ticks[i].Label = strings.TrimRight(strings.TrimRight(t.Label, "0"), ".")
		}
	}
	return ticks
}

// newLegend returns an empty legend for drawWithLegend.
func newLegend() plot.Legend {
	leg := plot.NewLegend()
	leg.TextStyle.Font.Size = 10 * pt
	leg.Top, leg.Left = true, true
	leg.Padding = 4 * pt
	leg.ThumbnailWidth = 14 * pt
	return leg
}

// setValueRange starts axis a at zero and leaves room above the largest of
// values for its label; with no positive value it spans 0 to 1.
func setValueRange(a *plot.Axis, values []float64) {
	top := 0.0
	for _, v := range values {
		top = max(top, v)
	}
	a.Min = 0
	a.Max = top * 1.12
	if a.Max <= 0 {
		a.Max = 1
	}
}

// newCanvas returns a white image canvas of w by h at chartDPI.
func newCanvas(w, h vg.Length) *vgimg.Canvas {
	return vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(chartDPI), vgimg.UseBackgroundColor(color.White))
}

// drawGrid draws plots, one column per inner slice, on dc with their axes
// aligned.
func drawGrid(plots [][]*plot.Plot, dc draw.Canvas) {
	if len(plots) == 0 || len(plots[0]) == 0 {
		return
	}
	t := draw.Tiles{
		Rows: len(plots), Cols: len(plots[0]),
		PadX: 0.3 * vg.Inch, PadY: 0.25 * vg.Inch,
		PadTop: 0.15 * vg.Inch, PadBottom: 0.1 * vg.Inch,
		PadLeft: 0.15 * vg.Inch, PadRight: 0.3 * vg.Inch,
	}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		for j, p := range plots[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
}

// drawWithLegend draws plots as drawGrid does, leaving a strip on the right
// of dc for leg, and draws leg there at the top.
func drawWithLegend(plots [][]*plot.Plot, leg plot.Legend, dc draw.Canvas) {
	w := leg.Rectangle(dc).Size().X + 2*legendPad
	drawGrid(plots, draw.Crop(dc, 0, -w, 0, 0))
	area := draw.Crop(dc, dc.Size().X-w+legendPad, -legendPad, 0, -0.5*vg.Inch)
	leg.Draw(area)
}

// familyColor returns the bar colour of a peer family: pgconnector in blue,
// the others in grey.
func familyColor(family string) color.Color {
	if family == "pgconnector" {
		return color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	}
	return color.RGBA{R: 0x9a, G: 0x9a, B: 0x9a, A: 0xff}
}

// seriesColor returns the colour of the i-th series of a grouped bar chart.
func seriesColor(i int) color.Color {
	palette := [...]color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
		{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	}
	return palette[i%len(palette)]
}

// finite returns v, or 0 when v is NaN, infinite or negative, so that a bad
// figure draws as no bar instead of failing the chart.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0
	}
	return v
}

// reversed returns a reversed copy of s.
func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

// connectOK reports whether at least one of c's connections succeeded.
func connectOK(c ConnectResult) bool {
	return c.Conns > 0 && c.Errors < c.Conns
}

// throughputOK reports whether t moved data at a measured rate.
func throughputOK(t ThroughputResult) bool {
	return t.MBPerSec > 0 && !math.IsInf(t.MBPerSec, 0)
}

// scenarioRows returns the rows of connect scenario n, in order.
func scenarioRows(rows []ConnectResult, n int) []ConnectResult {
	var out []ConnectResult
	for _, c := range rows {
		if c.Scenario == n {
			out = append(out, c)
		}
	}
	return out
}

// okRows returns the rows with at least one successful connection.
func okRows(rows []ConnectResult) []ConnectResult {
	var out []ConnectResult
	for _, c := range rows {
		if connectOK(c) {
			out = append(out, c)
		}
	}
	return out
}

// connectChartScenarios returns the scenarios among 1-4 that have a
// successful row: the panels of bench-connect.png.
func connectChartScenarios(rows []ConnectResult) []int {
	var out []int
	for n := 1; n <= 4; n++ {
		if len(okRows(scenarioRows(rows, n))) > 0 {
			out = append(out, n)
		}
	}
	return out
}

// hasClientBoundData reports whether scenario 5's rows make a
// bench-clientbound.png: whether any of them succeeded.
func hasClientBoundData(rows []ConnectResult) bool {
	return slices.ContainsFunc(rows, func(c ConnectResult) bool { return c.Scenario == 5 && connectOK(c) })
}

// hasThroughputData reports whether rows make a bench-throughput.png.
func hasThroughputData(rows []ThroughputResult) bool {
	return slices.ContainsFunc(rows, throughputOK)
}

// pivotKey is one cell of the pivot of scenario 5, 8 or 9: a peer (and
// ticket or role) at a client count.
type pivotKey struct {
	peer    string
	clients int
}

// pivotClients arranges a scenario's rows by peer key (see peerKey) and
// client count: the keys in order of first
// appearance, the client counts in increasing order, and the first
// successful row of each cell.
func pivotClients(rows []ConnectResult) (keys []string, counts []int, cells map[pivotKey]ConnectResult) {
	cells = map[pivotKey]ConnectResult{}
	for _, c := range rows {
		k := peerKey(c)
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		if _, dup := cells[pivotKey{k, c.Clients}]; !dup && connectOK(c) {
			cells[pivotKey{k, c.Clients}] = c
		}
	}
	return keys, clientCounts(rows), cells
}

// peerKey names a peer of a pivot: Peer, plus ", ticket" when the client
// held a Kerberos ticket, plus the role's authentication where the scenario
// has several roles (", scram-sha-256").
func peerKey(c ConnectResult) string {
	k := c.Peer
	if c.Ticket {
		k += ", ticket"
	}
	if c.User != "" {
		k += ", " + c.User
	}
	return k
}

// clientCounts returns the distinct client counts of rows, in increasing
// order.
func clientCounts(rows []ConnectResult) []int {
	var out []int
	for _, c := range rows {
		if !slices.Contains(out, c.Clients) {
			out = append(out, c.Clients)
		}
	}
	slices.Sort(out)
	return out
}
