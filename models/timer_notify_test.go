package models_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestTimerWakesOtherReplica: two replicas share a PostgreSQL database. B's
// maintenance loop found nothing due and sleeps for up to an hour; A (which
// runs no loop) snoozes a session for two seconds. B must hear of the timer
// through LISTEN/NOTIFY and resume the session when it is due, not an hour
// later.
func TestTimerWakesOtherReplica(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewURL(t, models.Postgres)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(app string) *models.Store {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		s, err := models.Open(ctx, u.String(), models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	app := "tp-timer-" + strings.ToLower(models.RandomSecret(6))
	a := open("tp-timer-a")
	if _, err := a.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	b := open(app)

	go b.Listen(ctx)
	passes := make(chan models.MaintenanceReport, 16)
	go b.RunMaintenance(ctx, time.Hour, func(r models.MaintenanceReport, err error) {
		if err != nil {
			t.Errorf("pass: %v", err)
		}
		passes <- r
	})
	// B's first pass finds nothing; its loop now sleeps up to the hour.
	select {
	case r := <-passes:
		if r != (models.MaintenanceReport{}) {
			t.Fatalf("first pass on an empty database did %+v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no first pass")
	}
	// Wait until B's listener is listening: its connection's last statement
	// is the LISTEN.
	for i := 0; ; i++ {
		var n int
		if err := a.DB.Raw(`SELECT count(*) FROM pg_stat_activity WHERE application_name = ? AND query LIKE 'LISTEN %'`, app).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if i == 300 {
			t.Fatal("B's listener did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}

	id := storetest.Session(ctx, t, a, nil)
	v := int64(1)
	until := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
	if _, err := a.Transition(ctx, id, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Until: until}); err != nil {
		t.Fatal(err)
	}
	// An hour is B's longest sleep; a minute is far more than the two
	// seconds of the snooze and the notice's way.
	deadline := time.After(time.Minute)
	for {
		select {
		case r := <-passes:
			if r.Resumed == 0 {
				continue
			}
			row, err := a.GetSession(ctx, id)
			if err != nil || row.Status != models.StatusOpen {
				t.Fatalf("after B's pass the session is %s (%v), want open", row.Status, err)
			}
			return
		case <-deadline:
			t.Fatal("B did not resume the snoozed session: it did not learn of A's timer")
		}
	}
}
