package models

import (
	"fmt"
	"testing"
)

// TestReviewPolicyNone checks that a policy asking for no double review gives
// every item one reviewer, also after defaults were applied once already
// (a second application used to turn "none" into the default 10%).
func TestReviewPolicyNone(t *testing.T) {
	t.Parallel()
	for _, p := range []ReviewPolicy{{DoubleShare: -1}, ReviewPolicy{DoubleShare: -1}.withDefaults()} {
		for i := 0; i < 500; i++ {
			if n := p.Needed(fmt.Sprintf("ses_%d", i), 4); n != 1 {
				t.Fatalf("policy %+v: item %d needs %d reviewers, want 1", p, i, n)
			}
		}
	}
	doubled := 0
	for i := 0; i < 2000; i++ {
		if (ReviewPolicy{}).withDefaults().Needed(fmt.Sprintf("ses_%d", i), 4) == 2 {
			doubled++
		}
	}
	if doubled < 120 || doubled > 280 { // 10% of 2000 = 200, generous bounds
		t.Fatalf("default policy doubled %d of 2000 items, want about 200", doubled)
	}
}
