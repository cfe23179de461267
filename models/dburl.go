package models

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted replaces a password in a database URL shown to people.
const redacted = "xxxxx"

// passwordParams are the query parameters of a PostgreSQL URL that hold a
// secret (libpq and pgx read both).
var passwordParams = map[string]bool{"password": true, "sslpassword": true}

var (
	passwordParamRE = regexp.MustCompile(`(?i)((?:^|[?&;\s])(?:ssl)?password=)[^&;\s]*`)
	userinfoRE      = regexp.MustCompile(`(://[^:/@?#\s]*:)[^@/?#\s]*@`)
)

// RedactDatabaseURL is raw with every password masked: the userinfo password
// and the password (and sslpassword) query parameters, which PostgreSQL URLs
// may carry instead. Use it wherever a database URL is logged, printed or put
// in an error. A URL that does not parse is masked by pattern, so a mistyped
// URL does not print its password either.
func RedactDatabaseURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		// sqlite:PATH is opaque and has no password; a broken URL may.
		return userinfoRE.ReplaceAllString(passwordParamRE.ReplaceAllString(raw, "${1}"+redacted), "${1}"+redacted+"@")
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = passwordParamRE.ReplaceAllString(u.RawQuery, "${1}"+redacted)
		} else {
			changed := false
			for k := range q {
				if passwordParams[strings.ToLower(k)] {
					q[k] = []string{redacted}
					changed = true
				}
			}
			if changed {
				u.RawQuery = q.Encode()
			}
		}
	}
	return u.String()
}
