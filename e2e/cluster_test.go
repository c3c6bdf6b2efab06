package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/internal/redistest"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/proxy"
)

// adminJSON GETs (or POSTs body to) an admin API path on base and decodes
// the answer into v.
func adminJSON(t *testing.T, method, base, path, body string, v any) {
	t.Helper()
	req, err := http.NewRequest(method, base+"/loopguard/api/"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: status %d", method, path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
}

type sessionDetail struct {
	Session  observe.SessionSummary `json:"session"`
	Timeline []observe.Entry        `json:"timeline"`
}

// waitTimeline polls base's timeline of session until it has n entries.
func waitTimeline(t *testing.T, base, session string, n int) sessionDetail {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		var d sessionDetail
		adminJSON(t, http.MethodGet, base, "sessions/"+session, "", &d)
		if len(d.Timeline) >= n || time.Now().After(deadline) {
			return d
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterAdminView: two replicas on one redis; an agent's turns land on
// both. Either replica's admin API shows the whole session (each entry
// tagged with its replica), both replicas' stats and live feed, and an
// operator's reset or mode on one replica acts on the agent's next turn on
// the other.
func TestClusterAdminView(t *testing.T) {
	rs := redistest.Start(t)
	fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
	reps := startReplicas(t, fake.URL(), rs.URL(0))
	hdr := map[string]string{"X-Session-ID": "fleet"}

	// The live feed of replica-0, open before the turns.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, reps[0].URL+"/loopguard/api/events", nil)
	feed, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Body.Close()

	for i, want := range []string{"warn", "constrain"} {
		if a := postRaw(t, reps[i].URL, loopingBody(3+i, false), hdr).header.Get(proxy.HeaderAction); a != want {
			t.Fatalf("turn %d on replica-%d: action %q; want %q", i, i, a, want)
		}
	}

	// replica-1's entry arrives on replica-0's live feed.
	sc := bufio.NewScanner(feed.Body)
	fromOther := false
	for !fromOther && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var e observe.Entry
			if json.Unmarshal([]byte(data), &e) == nil && e.Session == "fleet" && e.Replica == "replica-1" {
				fromOther = e.Action == policy.Constrain
			}
		}
	}
	if !fromOther {
		t.Errorf("replica-0's live feed ended (%v) without replica-1's constrain", sc.Err())
	}

	for i, rep := range reps {
		d := waitTimeline(t, rep.URL, "fleet", 2)
		var got []string
		for _, e := range d.Timeline {
			if e.Kind == observe.KindRequest {
				got = append(got, e.Replica+":"+string(e.Action))
			}
		}
		if strings.Join(got, " ") != "replica-0:warn replica-1:constrain" {
			t.Errorf("replica-%d: timeline requests %q; want replica-0's warn then replica-1's constrain", i, got)
		}
		if s := d.Session; s.Requests != 2 || s.Interventions != 2 || s.State != observe.StateConstrained {
			t.Errorf("replica-%d: session %+v; want 2 requests, 2 interventions, constrained", i, s)
		}
		var st observe.Stats
		adminJSON(t, http.MethodGet, rep.URL, "stats", "", &st)
		if st.Totals.Requests != 2 || st.Totals.Interventions != 2 {
			t.Errorf("replica-%d: stats totals %+v; want both replicas' 2 requests and 2 interventions", i, st.Totals)
		}
		var list observe.SessionList
		adminJSON(t, http.MethodGet, rep.URL, "sessions", "", &list)
		if list.Total != 1 || len(list.Sessions) != 1 || list.Sessions[0].Key != "fleet" {
			t.Errorf("replica-%d: sessions %+v; want fleet", i, list)
		}
	}

	// A reset through replica-1 restarts the ladder for replica-0: the loop
	// going on gets the first rung again instead of terminate.
	var ok map[string]any
	adminJSON(t, http.MethodPost, reps[1].URL, "sessions/fleet/reset", "", &ok)
	if a := postRaw(t, reps[0].URL, loopingBody(5, false), hdr).header.Get(proxy.HeaderAction); a != "warn" {
		t.Errorf("after a reset on replica-1, turn on replica-0: action %q; want warn", a)
	}
	// A mode set through replica-0 holds on replica-1.
	adminJSON(t, http.MethodPost, reps[0].URL, "sessions/fleet/mode", `{"mode":"off"}`, &ok)
	if a := postRaw(t, reps[1].URL, loopingBody(6, false), hdr).header.Get(proxy.HeaderAction); a != "" && a != "none" {
		t.Errorf("after mode off on replica-0, turn on replica-1: action %q; want none", a)
	}
	d := waitTimeline(t, reps[1].URL, "fleet", 5)
	var admins []string
	for _, e := range d.Timeline {
		if e.Kind == observe.KindAdmin {
			admins = append(admins, e.Replica+":"+e.Note)
		}
	}
	if strings.Join(admins, ", ") != "replica-1:reset, replica-0:mode off" {
		t.Errorf("replica-1's timeline admin entries %q; want the reset on replica-1 and the mode on replica-0", admins)
	}
}

// TestClusterDashboard: the dashboard of one replica shows, in headless
// Chromium, a session whose turns went to two replicas, each timeline entry
// tagged with the replica that saw it.
func TestClusterDashboard(t *testing.T) {
	rs := redistest.Start(t)
	fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
	reps := startReplicas(t, fake.URL(), rs.URL(0))
	ctx := browser(t)
	hdr := map[string]string{"X-Session-ID": loopSession}
	for i, want := range []string{"warn", "constrain", "terminate"} {
		if a := postRaw(t, reps[i%2].URL, loopingBody(3+i, false), hdr).header.Get(proxy.HeaderAction); a != want {
			t.Fatalf("turn %d on replica-%d: action %q; want %q", i, i%2, a, want)
		}
	}
	row := `#sessions tr[data-session="` + loopSession + `"]`
	var timeline string
	err := chromedp.Run(ctx,
		chromedp.Navigate(reps[0].URL+"/loopguard/"),
		chromedp.WaitVisible(row, chromedp.ByQuery),
		chromedp.Click(row, chromedp.ByQuery),
		chromedp.WaitVisible(`#timeline li[data-kind="request"] [data-replica="replica-1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#timeline li[data-kind="request"] [data-replica="replica-0"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#timeline li [data-action="terminate"]`, chromedp.ByQuery),
		chromedp.Text(`#timeline`, &timeline, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("dashboard of replica-0: %v", err)
	}
	for _, want := range []string{"warn L0", "constrain L1", "terminate L2", "@replica-0", "@replica-1"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("replica-0's dashboard timeline lacks %q:\n%s", want, timeline)
		}
	}
}
