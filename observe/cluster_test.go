package observe

import (
	"context"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/redistest"
	"github.com/loopguard/loopguard/policy"
	"github.com/rs/zerolog"
)

// startReplica is one replica's observer, sharing its record through the
// redis server at url.
func startReplica(t *testing.T, url, name string) *Observer {
	t.Helper()
	store, err := policy.NewRedisStore(policy.Config{RedisURL: url, StoreTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(nil, zerolog.Nop(), Options{Replica: name})
	if err != nil {
		t.Fatal(err)
	}
	c := StartCluster(o.Recorder(), store, zerolog.Nop(), 10*time.Millisecond)
	t.Cleanup(func() {
		c.Close()
		_ = store.Close()
	})
	return o
}

// waitFor polls cond until it holds; it fails the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func entryKey(e Entry) string { return string(e.Kind) + "@" + e.Replica }

// TestClusterSharesView: two replicas on one redis each show both
// replicas' sessions, timelines (tagged with the replica), stats,
// recoveries and admin actions, each entry once.
func TestClusterSharesView(t *testing.T) {
	srv := redistest.Start(t)
	a, b := startReplica(t, srv.URL(0), "a:8787"), startReplica(t, srv.URL(0), "b:8787")
	ra, rb := a.Recorder(), b.Recorder()

	a.Request(RequestInfo{Session: "s1", Model: "m", Steps: 3, Decision: loopDecision(inspect.ToolRepetition, policy.Warn, 0, "p")})
	waitFor(t, "replica b never saw a's request", func() bool { _, _, ok := rb.Session("s1"); return ok })
	// The agent's next turn lands on b and shows the loop stopped: b tells
	// the outcome of a's warning.
	b.Request(RequestInfo{Session: "s1", Model: "m", Steps: 4, Decision: &policy.Decision{Action: policy.None, Level: -1, Recovered: []string{"p"}}})
	b.Response(ResponseInfo{Session: "s2", Status: 200, Cut: policy.Cut{Category: inspect.TokenDegeneration, TokensSaved: 40}})

	want := []string{"request@a:8787", "recovery@b:8787", "request@b:8787"}
	for name, r := range map[string]*Recorder{"a": ra, "b": rb} {
		waitFor(t, "replica "+name+" never saw both replicas' entries", func() bool {
			_, tl, _ := r.Session("s1")
			_, _, ok := r.Session("s2")
			return len(tl) >= len(want) && ok
		})
		sum, tl, _ := r.Session("s1")
		var got []string
		for _, e := range tl {
			got = append(got, entryKey(e))
		}
		if len(got) != len(want) {
			t.Fatalf("replica %s: s1 timeline %q; want %q (each entry once)", name, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("replica %s: s1 timeline %q; want %q", name, got, want)
				break
			}
		}
		if sum.Requests != 2 || sum.Detections != 1 || sum.Interventions != 1 || sum.Recovered != 1 || sum.State != StateRecovered {
			t.Errorf("replica %s: s1 summary %+v; want 2 requests, 1 detection, 1 intervention, recovered", name, sum)
		}
		if list := r.Sessions(Filter{}); list.Total != 2 {
			t.Errorf("replica %s: %d sessions; want 2", name, list.Total)
		}
		st := r.Stats(Filter{}, time.Now())
		if tot := st.Totals; tot.Requests != 2 || tot.Detections != 1 || tot.Interventions != 1 || tot.Cuts != 1 || tot.TokensSaved != 40 {
			t.Errorf("replica %s: stats totals %+v; want both replicas' counts", name, tot)
		}
		if len(st.Recovery) != 1 || st.Recovery[0].Recovered != 1 {
			t.Errorf("replica %s: recovery stats %+v; want one recovered warning", name, st.Recovery)
		}
		if feed, _ := r.Since(0, 100); len(feed) != 4 {
			t.Errorf("replica %s: live feed has %d entries; want the 4 of both replicas", name, len(feed))
		}
	}

	// Admin actions recorded on one replica show on the other.
	ra.admin("s1", "mode shadow", policy.ModeShadow, time.Now())
	rb.admin("s2", noteReset, "", time.Now())
	waitFor(t, "admin actions did not cross", func() bool {
		sa, _, _ := rb.Session("s1")
		_, tl, _ := ra.Session("s2")
		return sa.Mode == policy.ModeShadow && len(tl) == 2 && tl[1].Kind == KindAdmin && tl[1].Replica == "b:8787"
	})
}

// A replica that starts later reads back what the feed holds.
func TestClusterBackfill(t *testing.T) {
	srv := redistest.Start(t)
	a := startReplica(t, srv.URL(0), "a")
	for _, k := range []string{"x", "y", "z"} {
		a.Request(RequestInfo{Session: k})
	}
	store, err := policy.NewRedisStore(policy.Config{RedisURL: srv.URL(0), StoreTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	waitFor(t, "a's entries never reached redis", func() bool {
		msgs, err := store.Read(context.Background(), "", 10)
		return err == nil && len(msgs) == 3
	})
	late := startReplica(t, srv.URL(0), "late").Recorder()
	waitFor(t, "the late replica did not read back the feed", func() bool { return late.Sessions(Filter{}).Total == 3 })
}

// Another replica's entry that arrives after a newer one of this replica
// takes its place in the timeline by time and does not set the session's
// state: the newest entry does.
func TestIngestLateEntry(t *testing.T) {
	o, _, _, c := newTestObserver(t, Options{Replica: "here", Timeline: 2})
	r := o.Recorder()
	t0 := c.t
	c.t = t0.Add(time.Second)
	o.Request(RequestInfo{Session: "s", Decision: loopDecision(inspect.ToolRepetition, policy.Constrain, 1, "p")})
	r.ingest(Entry{At: t0, Session: "s", Kind: KindRequest, Replica: "there", Category: inspect.ToolRepetition,
		Action: policy.Warn, Would: policy.Warn, Pattern: "p", Level: 0})
	sum, tl, _ := r.Session("s")
	if len(tl) != 2 || tl[0].Replica != "there" || tl[1].Replica != "here" {
		t.Fatalf("timeline %+v; want there's older warning, then here's constrain", tl)
	}
	if sum.State != StateConstrained || sum.Action != policy.Constrain || sum.Requests != 2 || !sum.FirstSeen.Equal(t0) {
		t.Errorf("summary %+v; want constrained (the newest), 2 requests, first seen at the late entry", sum)
	}
	// A ring that is full drops the oldest, even when it is the late one.
	r.ingest(Entry{At: t0.Add(-time.Second), Session: "s", Kind: KindCut, Replica: "there", Category: inspect.TokenDegeneration, Level: -1})
	if _, tl, _ := r.Session("s"); len(tl) != 2 || tl[0].Kind != KindRequest || tl[0].Replica != "there" {
		t.Errorf("timeline %+v; want the two requests (the older cut dropped from the full ring)", tl)
	}
	if sum, _, _ := r.Session("s"); sum.State != StateConstrained || sum.Cuts != 1 {
		t.Errorf("summary %+v; want the cut counted and the state kept", sum)
	}
}
