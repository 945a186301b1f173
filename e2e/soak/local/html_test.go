package local

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// The HTML report of a real soak local run: its structure against the
// gate's lines and the live record, and how a browser renders it.

// checkReportHTML checks the report.html of a run against what the gate
// printed and the live record holds: the verdict is the gate's, every
// target has a section with a chart per node, every roll a mark, every
// failure sample (and every bucket that dropped some) a row. It returns
// the page's path.
func checkReportHTML(t *testing.T, r localRun) string {
	t.Helper()
	path := filepath.Join(r.dir, htmlReport)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("soak local wrote no HTML report: %v", err)
	}
	page := string(b)
	verdict := regexp.MustCompile(`(?m)^VERDICT (\S+)`).FindStringSubmatch(r.stdout)
	if verdict == nil || !strings.Contains(page, `data-verdict="`+verdict[1]+`"`) {
		t.Errorf("the page's verdict is not the gate's %v", verdict)
	}
	for _, m := range regexp.MustCompile(`(?m)^NODE  (\S+)  (\S+)  (\S+)`).FindAllStringSubmatch(r.stdout, -1) {
		target, node := m[1], m[2]
		sec := regexp.MustCompile(`(?s)<section class="target" id="[^"]*" data-target="` + regexp.QuoteMeta(target) + `".*?(<section class="target"|</body>)`).FindString(page)
		if sec == "" {
			t.Errorf("no section of %s", target)
			continue
		}
		if !strings.Contains(sec, `<svg class="timeline" data-node="`+node+`"`) {
			t.Errorf("%s has no chart of %s", target, node)
		}
		if !strings.Contains(page, `<tr class="node" data-target="`+target+`" data-node="`+node+`" data-status="`+m[3]+`"`) {
			t.Errorf("the gate table has no row of %s on %s %s", target, node, m[3])
		}
	}
	for ref := range r.rollLines(t) {
		if !strings.Contains(page, `<a class="roll" href="#`) || !strings.Contains(page, `data-ref="`+ref+`"`) {
			t.Errorf("no mark of the roll of %s", ref)
		}
	}
	f, err := os.Open(filepath.Join(r.dir, liveFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lv, err := record.ReadLive(f)
	if err != nil {
		t.Fatal(err)
	}
	rows := len(lv.Samples)
	for _, bl := range lv.Buckets {
		if bl.SamplesDropped > 0 {
			rows++
		}
	}
	if got := strings.Count(page, `<tr class="sample`); got != rows {
		t.Errorf("%d failure rows, the live record holds %d samples and dropped buckets", got, rows)
	}
	return path
}

// shotWidth and shotHeight are the browser window of the screenshot.
const shotWidth, shotHeight = 1000, 1500

// checkInBrowser loads a page from disk in headless Chromium, with no
// network (a network namespace of its own), takes a screenshot, and
// checks that the page logged nothing to the console (it has no script:
// any message is an error), that every chart path is drawn (non-empty d
// in the DOM the browser built) and that the screenshot shows the 2xx
// line's colour. It returns the screenshot.
func checkInBrowser(t *testing.T, page string) []byte {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium is not installed (.ci/run installs Debian's chromium): %v", err)
		}
		t.Skipf("chromium is not installed (Debian's chromium package; CI installs it): %v", err)
	}
	dir := t.TempDir()
	shot := filepath.Join(dir, "report.png")
	browse := func(extra ...string) (string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		args := []string{"--net"}
		if os.Geteuid() != 0 {
			args = append(args, "--map-root-user")
		}
		args = append(args, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
			"--user-data-dir="+filepath.Join(dir, "profile"), "--enable-logging=stderr", "--v=0",
			"--window-size="+strconv.Itoa(shotWidth)+","+strconv.Itoa(shotHeight))
		args = append(args, extra...)
		args = append(args, "file://"+page)
		cmd := exec.CommandContext(ctx, "unshare", args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %s: %v\n%s", strings.Join(extra, " "), err, tail(stderr.String(), 20))
		}
		return stdout.String(), stderr.String()
	}
	_, logs := browse("--screenshot=" + shot)
	dom, logs2 := browse("--dump-dom")
	for _, l := range strings.Split(logs+logs2, "\n") {
		// The browser's own pages (chrome://, such as its omnibox) log
		// too, on a loaded machine; only the page's messages count.
		if strings.Contains(l, ":CONSOLE") && !strings.Contains(l, "source: chrome://") {
			t.Errorf("the page logged to the console: %s", l)
		}
	}
	charts := strings.Count(dom, `<svg class="timeline"`)
	if charts == 0 {
		t.Errorf("the browser's DOM holds no chart")
	}
	paths := regexp.MustCompile(`<path class="(rate|p50|p99|fail)"[^>]*? d="([^"]*)"`).FindAllStringSubmatch(dom, -1)
	if len(paths) < 3*charts {
		t.Errorf("%d chart paths for %d charts", len(paths), charts)
	}
	for _, p := range paths {
		if p[1] != "fail" && p[2] == "" {
			t.Errorf("an empty %s path in the DOM", p[1])
		}
	}
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X != shotWidth || sz.Y != shotHeight {
		t.Errorf("screenshot %v, want %dx%d", sz, shotWidth, shotHeight)
	}
	if n := countColour(img, 0x1f, 0x77, 0xb4); n == 0 {
		t.Errorf("the screenshot shows no 2xx line (no pixel of its colour)")
	}
	return b
}

// countColour counts the pixels of one colour, give or take antialiasing.
func countColour(img image.Image, r, g, b uint8) int {
	near := func(a uint32, want uint8) bool { d := int(a>>8) - int(want); return d > -12 && d < 12 }
	n := 0
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if near(pr, r) && near(pg, g) && near(pb, b) {
				n++
			}
		}
	}
	return n
}

// keepScreenshot writes the screenshot of the --rolls --no-drain run where
// CI keeps it (the system's temp dir), and with -update to docs/, where
// the README shows it.
func keepScreenshot(t *testing.T, png []byte) {
	t.Helper()
	kept := filepath.Join(os.TempDir(), "sortie-report-rolls-no-drain.png")
	if err := os.WriteFile(kept, png, 0o644); err != nil {
		t.Errorf("keep the screenshot: %v", err)
	} else {
		t.Logf("the report's screenshot: %s", kept)
	}
	if *update {
		if err := record.WriteFile(filepath.Join("..", "..", "..", "docs", "report-html.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
