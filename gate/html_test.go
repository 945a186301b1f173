package gate

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sortie-soak/sortie/record"
)

// TestHTMLLeavesTheVerdictAlone runs every fixture with and without
// --html: what is printed and the exit code are the same, and the page,
// written whenever the input was usable, carries the same verdict.
func TestHTMLLeavesTheVerdictAlone(t *testing.T) {
	for name, want := range wantExit {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			plain, code := runCase(t, dir)
			page := filepath.Join(t.TempDir(), "report.html")
			withHTML, codeHTML := runCase(t, dir, "--html", page)
			if withHTML != plain || codeHTML != code {
				t.Fatalf("--html changed the output or exit code (%d, %d without):\n%s\nwithout:\n%s", codeHTML, code, withHTML, plain)
			}
			b, err := os.ReadFile(page)
			if want == 2 {
				if err == nil {
					t.Errorf("a page was written for unusable input")
				}
				return
			}
			if err != nil {
				t.Fatalf("no page: %v", err)
			}
			verdict := regexp.MustCompile(`(?m)^VERDICT (\S+)|^  "verdict": "(\w+)"`).FindStringSubmatch(plain)
			if verdict == nil {
				t.Fatalf("no VERDICT line:\n%s", plain)
			}
			if v := verdict[1] + verdict[2]; !strings.Contains(string(b), `data-verdict="`+v+`"`) {
				t.Errorf("the page does not carry the verdict %s", v)
			}
			for _, p := range outsideRefs(string(b)) {
				t.Errorf("the page refers outside itself: %q", p)
			}
		})
	}
}

// outsideRefs lists anything in a page that would make a browser fetch:
// a script, style sheet, image, frame or font from anywhere, a link
// elsewhere than the page itself.
func outsideRefs(page string) []string {
	// Attribute values cannot hold a raw quote (the page escapes them), so
	// with the values blanked what is left of a tag is names only.
	names := regexp.MustCompile(`="[^"]*"`).ReplaceAllString(page, `=""`)
	var out []string
	for _, c := range []struct {
		re   *regexp.Regexp
		text string
	}{
		{regexp.MustCompile(`(?i)<(script|link|img|iframe|object|embed|image|use|base)\b`), page},
		{regexp.MustCompile(`(?i)<[a-z][^>]*\s(src|srcset|xlink:href|action|formaction|poster)\s*=`), names},
		{regexp.MustCompile(`(?i)<[a-z][^>]*\shref\s*=\s*("[^#"]|[^"#\s>])`), page},
		{regexp.MustCompile(`(?i)url\(|@import|@font-face`), page},
	} {
		out = append(out, c.re.FindAllString(c.text, -1)...)
	}
	return out
}

func TestOutsideRefsCanFail(t *testing.T) {
	for _, page := range []string{
		`<script src="x.js"></script>`, `<img src="a.png">`, `<a href="http://example.com/">`,
		`<style>body{background:url(a.png)}</style>`, `<link rel="stylesheet" href="s.css">`,
	} {
		if len(outsideRefs(page)) == 0 {
			t.Errorf("%s passes as self-contained", page)
		}
	}
	if p := outsideRefs(`<a class="roll" href="#t0-z1">x</a>`); len(p) != 0 {
		t.Errorf("a link inside the page is refused: %q", p)
	}
}

// TestHTMLAttribution checks the page of the attribution fixture: a chart
// per target and node, a mark per roll and fault on the charts of what it
// covers, a row per failure sample, the unattributed ones highlighted.
func TestHTMLAttribution(t *testing.T) {
	page := filepath.Join(t.TempDir(), "report.html")
	out, _ := runCase(t, filepath.Join("testdata", "attrib"), "--per-node", "--html", page)
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	live, err := os.ReadFile(filepath.Join("testdata", "attrib", "live.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// A row per sample line, and one per bucket that dropped some.
	samples := strings.Count(string(live), `"type":"sample"`) + strings.Count(string(live), `"samples_dropped"`)
	rows := strings.Count(s, `<tr class="sample`)
	if rows != samples {
		t.Errorf("%d sample rows, want %d (one per sample line)", rows, samples)
	}
	unattr := regexp.MustCompile(`(?m)^UNATTRIBUTED  \S+  \S+  at=`).FindAllString(out, -1)
	if got := strings.Count(s, `<tr class="sample unattributed"`); got != len(unattr) || got == 0 {
		t.Errorf("%d highlighted rows, the gate lists %d unattributed failures", got, len(unattr))
	}
	// The zoomed views draw the same failures again; count the whole run's.
	whole := regexp.MustCompile(`(?s)<section class="zoom".*?</section>`).ReplaceAllString(s, "")
	if got := strings.Count(whole, `<path class="unattributed"`); got != len(unattr) {
		t.Errorf("%d unattributed ticks on the charts, want %d", got, len(unattr))
	}
	for _, target := range regexp.MustCompile(`(?m)^(?:PASS|FAIL)  (\S+)`).FindAllStringSubmatch(out, -1) {
		sec := section(t, s, target[1])
		nodes := regexp.MustCompile(`(?m)^NODE  `+regexp.QuoteMeta(target[1])+`  (\S+)`).FindAllStringSubmatch(out, -1)
		if len(nodes) == 0 {
			t.Errorf("no NODE line of %s", target[1])
		}
		for _, n := range nodes {
			if !strings.Contains(sec, `<svg class="timeline" data-node="`+n[1]+`"`) {
				t.Errorf("%s has no chart of %s", target[1], n[1])
			}
		}
	}
	for _, roll := range regexp.MustCompile(`(?m)^ROLL  (\S+)  `).FindAllStringSubmatch(out, -1) {
		name := roll[1][strings.LastIndexByte(roll[1], '/')+1:]
		if !strings.Contains(s, `<a class="roll" href="#`) || !strings.Contains(s, `data-ref="`+name+`"`) {
			t.Errorf("no mark of the roll %s", roll[1])
		}
	}
	if !regexp.MustCompile(`<path class="rate" d="M[0-9]`).MatchString(s) {
		t.Errorf("no rate line is drawn")
	}
}

// section is one target's part of the page.
func section(t *testing.T, page, target string) string {
	t.Helper()
	i := strings.Index(page, `<section class="target" id="`)
	for i >= 0 {
		j := strings.Index(page[i+1:], `<section class="target" id="`)
		end := len(page)
		if j >= 0 {
			end = i + 1 + j
		}
		if strings.Contains(page[i:min(end, i+200)], `data-target="`+target+`"`) {
			return page[i:end]
		}
		if j < 0 {
			break
		}
		i = end
	}
	t.Fatalf("no section of %s", target)
	return ""
}

// FuzzHTMLLive grades the attribution fixture with a fuzzed live record,
// with and without --html: whatever the record holds (a huge index, a
// time that does not parse, garbage), the page is written, and the lines
// and exit code are those of the run without it.
func FuzzHTMLLive(f *testing.F) {
	fixture := filepath.Join("testdata", "attrib")
	seed, err := os.ReadFile(filepath.Join(fixture, "live.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"type":"bucket","label":"soak/svc-1","backend":"10.0.1.5:8443","index":4294967295,"start":"2026-03-02T10:00:00.400Z","offset_ms":0,"width_ms":1000,"counters":{"benchmark.http_2xx":1}}`))
	f.Add([]byte(`{"type":"bucket","label":"soak/svc-1","backend":"10.0.1.5:8443","index":2,"start":"yesterday","width_ms":-5,"counters":{"benchmark.http_5xx":3}}` + "\n" +
		`{"type":"sample","label":"soak/svc-9","backend":"x","due":"?","outcome":"2026-03-02T10:00:00Z","class":"benchmark.http_5xx"}`))
	f.Add([]byte("garbage\n{\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		live := filepath.Join(dir, "live.jsonl")
		if err := os.WriteFile(live, data, 0o644); err != nil {
			t.Fatal(err)
		}
		plain, code := runCase(t, fixture, "--live", live, "--per-node")
		page := filepath.Join(dir, "report.html")
		withHTML, codeHTML := runCase(t, fixture, "--live", live, "--per-node", "--html", page)
		if withHTML != plain || codeHTML != code {
			t.Fatalf("--html changed the output or exit code (%d, %d without):\n%s\nwithout:\n%s", codeHTML, code, withHTML, plain)
		}
		if _, err := os.Stat(page); (err == nil) != (code != 2) {
			t.Fatalf("exit %d, page written: %v", code, err == nil)
		}
	})
}

// TestHTMLEscapesTheRecord: names and reasons from the report reach the
// page as text, never as markup.
func TestHTMLEscapesTheRecord(t *testing.T) {
	evil := `<script>alert("x")</script><img src=x>`
	v := Verdict{Result: ResultFail, ExitCode: 1, Targets: []Target{{Name: evil, Status: ResultFail, Reasons: []string{evil},
		Nodes: []Node{{Node: evil, Addr: `"onmouseover="x`, Status: "FAIL", Reasons: []string{evil}}}}},
		Notes: []string{evil}}
	var b strings.Builder
	if err := WriteHTML(&b, Input{Source: &record.Source{}}, v, evil); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if refs := outsideRefs(page); len(refs) > 0 {
		t.Errorf("the record's text became markup: %q", refs)
	}
	if strings.Contains(page, `"onmouseover=`) {
		t.Errorf("an address broke out of its attribute")
	}
	if !strings.Contains(page, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") {
		t.Errorf("the name is not on the page as text")
	}
}

// TestHTMLUnwritable: a page that cannot be written is said after the
// verdict's lines, which are unchanged, and fails a run that passed.
func TestHTMLUnwritable(t *testing.T) {
	dir := filepath.Join("testdata", "clean")
	plain, code := runCase(t, dir)
	if code != 0 {
		t.Fatalf("the clean fixture exits %d", code)
	}
	bad := filepath.Join(t.TempDir(), "missing", "report.html")
	got, codeHTML := runCase(t, dir, "--html", bad)
	if codeHTML != 1 {
		t.Errorf("exit %d, want 1", codeHTML)
	}
	stdout, _, _ := strings.Cut(plain, "--- exit")
	if !strings.HasPrefix(got, stdout+"--- stderr\nsortie-gate: write html "+bad) {
		t.Errorf("want the verdict's lines, then the error:\n%s", got)
	}
}
