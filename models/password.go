package models

import (
	"strings"

	"github.com/trustelem/zxcvbn"
)

// The password policy, the one place that says what a password must be. It
// applies wherever a person chooses or is given a password: creating a user
// (console, CLI), an admin's reset, changing one's own password, and the
// CLI's reset.
const (
	// MinPasswordLen is the shortest password accepted, in characters.
	MinPasswordLen = 12
	// MaxPasswordBytes is bcrypt's limit: it ignores what comes after.
	MaxPasswordBytes = 72
	// MinPasswordScore is the least zxcvbn score accepted (0-4): 3 is "safely
	// unguessable: moderate protection from offline slow-hash scenario"
	// (about 10^8 guesses and up), which is what bcrypt hashes are for.
	MinPasswordScore = 3
)

// CheckPassword reports what is wrong with password under the policy, as
// field errors on field (nil when it is acceptable). related are the
// account's own words (email, name), which zxcvbn counts as known to an
// attacker: "rita.smith-2026" is weak for rita.smith@example.com.
func CheckPassword(field, password string, related ...string) error {
	v := &ValidationError{}
	checkPassword(v, field, password, related...)
	return v.Err()
}

func checkPassword(v *ValidationError, field, password string, related ...string) {
	switch {
	case len([]rune(password)) < MinPasswordLen:
		v.Add(field, "must be at least %d characters", MinPasswordLen)
		return
	case len(password) > MaxPasswordBytes:
		v.Add(field, "must be at most %d bytes", MaxPasswordBytes)
		return
	case HasNUL(password):
		// CheckNUL reports it where the input is a struct; a password
		// checked alone needs it said here.
		v.Add(field, NULMessage)
		return
	}
	var words []string
	for _, r := range related {
		r = strings.ToLower(strings.TrimSpace(r))
		if r == "" {
			continue
		}
		words = append(words, r)
		// The parts of an email and a name are guessed on their own too.
		words = append(words, strings.FieldsFunc(r, func(c rune) bool {
			return c == '@' || c == '.' || c == ' ' || c == '-' || c == '_' || c == '+'
		})...)
	}
	if zxcvbn.PasswordStrength(password, words).Score < MinPasswordScore {
		v.Add(field, "is too easy to guess: use a longer passphrase of unrelated words, not names, dates or keyboard patterns")
	}
}
