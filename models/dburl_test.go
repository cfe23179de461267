package models

import (
	"strings"
	"testing"
)

// TestRedactDatabaseURL checks that no password survives in a database URL
// shown to people: in the userinfo, in the query, or in a URL that does not
// parse.
func TestRedactDatabaseURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:s3cret@db:5432/prod?sslmode=disable", "postgres://app:xxxxx@db:5432/prod?sslmode=disable"},
		{"postgres://app@db/prod?password=s3cret&sslmode=require", "postgres://app@db/prod?password=xxxxx&sslmode=require"},
		{"postgresql://app@db/prod?sslmode=verify-full&sslpassword=s3cret", "postgresql://app@db/prod?sslmode=verify-full&sslpassword=xxxxx"},
		{"postgres://app:s3cret@db/prod?PASSWORD=s3cret", "postgres://app:xxxxx@db/prod?PASSWORD=xxxxx"},
		{"postgres://app@db/prod?sslmode=disable", "postgres://app@db/prod?sslmode=disable"},
		{"sqlite:/var/lib/taskpilots/taskpilots.db", "sqlite:/var/lib/taskpilots/taskpilots.db"},
		{"data/taskpilots.db", "data/taskpilots.db"},
		// Does not parse (bad escape); masked by pattern.
		{"postgres://app:s3cret@db/prod%zz?password=s3cret", "postgres://app:xxxxx@db/prod%zz?password=xxxxx"},
	} {
		got := RedactDatabaseURL(tc.in)
		if got != tc.want {
			t.Errorf("RedactDatabaseURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "s3cret") {
			t.Errorf("RedactDatabaseURL(%q) = %q keeps the password", tc.in, got)
		}
	}
	if _, _, err := ParseDatabaseURL("mysql://app:s3cret@db/prod?password=s3cret"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("ParseDatabaseURL error = %v: want an error without the password", err)
	}
}
