package views

import (
	"net/url"
	"strconv"

	"github.com/taskpilots/handoff/models"
)

// TimelinePage is how many events the session page's timeline shows at
// once. A long-lived session has thousands of events, each a row with its
// payload; showing the newest page keeps the page light (under 150 KB), and
// links page back through the older ones.
const TimelinePage = 100

// timelineWindow is the part of the timeline the page shows: the events
// of the type filter with a seq below EventsBefore (all when 0), the newest
// TimelinePage of them, oldest first. olderBefore is the seq to page back
// from (0 when nothing older is left); total counts the filtered events.
func (d SessionPageData) timelineWindow() (shown []models.Event, olderBefore int64, total int) {
	var evs []models.Event
	for _, e := range d.Events {
		if d.TypeFilter == "" || e.Type == d.TypeFilter {
			evs = append(evs, e)
		}
	}
	total = len(evs)
	if d.EventsBefore > 0 {
		n := 0
		for n < len(evs) && evs[n].Seq < d.EventsBefore {
			n++
		}
		evs = evs[:n]
	}
	if len(evs) > TimelinePage {
		evs = evs[len(evs)-TimelinePage:]
		olderBefore = evs[0].Seq
	}
	return evs, olderBefore, total
}

// timelineURL is the session page at the timeline, with the type filter
// kept and paged to before (the newest events when 0).
func (d SessionPageData) timelineURL(before int64) string {
	u := string(SessionURL(d.Row.ID))
	sep := "?"
	if d.TypeFilter != "" {
		u += sep + "type=" + url.QueryEscape(string(d.TypeFilter))
		sep = "&"
	}
	if before > 0 {
		u += sep + "before=" + strconv.FormatInt(before, 10)
	}
	return u + "#timeline"
}
