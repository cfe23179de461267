package models

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Packet is the minimal context a worker gets (context packet v2): built
// from the latest valid state only, never from the raw history, and never
// larger than its byte budget. The stable fields (goal, constraints,
// resources, done criteria) come first and are covered by PrefixHash, so
// callers can reuse a cached prompt prefix; the volatile fields follow.
type Packet struct {
	Goal            string           `json:"goal"`
	Constraints     []string         `json:"constraints"`
	Resources       []Resource       `json:"resources"`
	DoneCriteria    []string         `json:"done_criteria"`
	PrefixHash      string           `json:"prefix_hash"`
	SessionID       string           `json:"session_id"`
	BasedOnVersion  int64            `json:"based_on_version"`
	Step            string           `json:"step"`
	Instructions    string           `json:"instructions"`
	RunReason       RunReason        `json:"run_reason"`
	ConfirmedFacts  map[string]any   `json:"confirmed_facts"`
	OpenQuestions   []string         `json:"open_questions"`
	Notes           []PacketNote     `json:"notes"`
	PreviousOutputs []PreviousOutput `json:"previous_outputs"`
	CompletedSteps  []PacketStep     `json:"completed_steps"`
	Risks           []string         `json:"risks"`
	Budget          PacketBudget     `json:"budget"`
}

// PacketStep summarises a finished step for the packet.
type PacketStep struct {
	Step       string `json:"step"`
	ResultType string `json:"result_type"`
	NextStep   string `json:"next_step,omitempty"`
}

// PacketNote is a human's note as the packet carries it.
type PacketNote struct {
	By        string `json:"by"`
	Text      string `json:"text"`
	AtVersion int64  `json:"at_version"`
}

// PreviousOutput is the output and evidence of a completed step, or, after
// a join, of a child session (SessionID, Status and Goal set).
type PreviousOutput struct {
	Step      string          `json:"step"`
	SessionID string          `json:"session_id,omitempty"`
	Status    Status          `json:"status,omitempty"`
	Goal      string          `json:"goal,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	Evidence  []Evidence      `json:"evidence"`
	AtVersion int64           `json:"at_version"`
}

// PacketBudget says how large the packet may be, how large it is (the whole
// JSON encoding, this field included) and which fields were trimmed to fit.
type PacketBudget struct {
	MaxBytes int      `json:"max_bytes"`
	Bytes    int      `json:"bytes"`
	Trimmed  []string `json:"trimmed"`
}

// Byte budget of a packet (README "JSON API", context packet v2).
const (
	DefaultPacketMaxBytes = 32768
	MinPacketMaxBytes     = 4096
	MaxPacketMaxBytes     = 1048576
)

// Bounds of a packet's lists, whatever the history length; the byte budget
// then trims within them.
const (
	packetSteps   = 10
	packetOutputs = 10
	packetNotes   = 10
	packetRisks   = 10
	packetQs      = 10
)

// Names of the packet fields trimming may touch, as Budget.Trimmed lists
// them.
const (
	trimOutputs      = "previous_outputs"
	trimSteps        = "completed_steps"
	trimNotes        = "notes"
	trimFacts        = "confirmed_facts"
	trimRisks        = "risks"
	trimQuestions    = "open_questions"
	trimInstructions = "instructions"
	trimRunReason    = "run_reason"
	trimGoal         = "goal"
	trimConstraints  = "constraints"
	trimResources    = "resources"
	trimDone         = "done_criteria"
	trimStep         = "step"
)

var allTrimNames = []string{
	trimOutputs, trimSteps, trimNotes, trimFacts, trimRisks, trimQuestions, trimInstructions,
	trimRunReason, trimGoal, trimConstraints, trimResources, trimDone, trimStep,
}

func validatePacketMaxBytes(v *ValidationError, field string, n *int) {
	if n != nil && (*n < MinPacketMaxBytes || *n > MaxPacketMaxBytes) {
		v.Add(field, "must be between %d and %d", MinPacketMaxBytes, MaxPacketMaxBytes)
	}
}

// PacketMaxBytes is the byte budget of the session's packet: its
// delegation's packet_max_bytes, or the default.
func PacketMaxBytes(st State) int {
	if st.Delegation != nil && st.Delegation.PacketMaxBytes > 0 {
		return st.Delegation.PacketMaxBytes
	}
	return DefaultPacketMaxBytes
}

// BuildPacket builds the context packet for the session's current step,
// within the session's byte budget (PacketMaxBytes).
func BuildPacket(st State, instructions string) Packet {
	return BuildPacketWithin(st, instructions, PacketMaxBytes(st))
}

// BuildPacketWithin builds the packet so that its JSON encoding is at most
// maxBytes long (at least MinPacketMaxBytes). When everything does not fit,
// the oldest items go first, by the state version that produced them, across
// previous outputs, completed steps, notes, facts, risks and open questions;
// a single item larger than its share is truncated with a marker saying how
// many bytes were cut. The run reason (which carries an input answer), the
// newest fact, the input answer fact and the newest note are never dropped:
// at worst they are truncated.
func BuildPacketWithin(st State, instructions string, maxBytes int) Packet {
	maxBytes = max(maxBytes, MinPacketMaxBytes)
	if instructions == "" && st.Delegation != nil {
		instructions = st.Delegation.Instructions
	}
	b := &packetBuilder{max: maxBytes}
	p := Packet{
		Goal: st.Goal, Constraints: cloneSlice(nonNil(st.Constraints)), Resources: cloneSlice(nonNil(st.Resources)),
		DoneCriteria: cloneSlice(nonNil(st.DoneCriteria)), PrefixHash: PrefixHash(st),
		SessionID: st.SessionID, BasedOnVersion: st.Version, Step: st.CurrentStep,
		Instructions: b.fit(trimInstructions, instructions, maxBytes/8),
		RunReason:    runReasonOf(st),
	}
	p.RunReason.Detail = b.fit(trimRunReason, p.RunReason.Detail, maxBytes/8)
	p.RunReason.Question = b.fit(trimRunReason, p.RunReason.Question, maxBytes/16)
	b.collect(st)
	b.trim(&p)
	return p
}

// runReasonOf is the state's run reason, or a first run.
func runReasonOf(st State) RunReason {
	r := RunReason{Kind: RunFirst, Attempt: 1}
	if st.RunReason != nil {
		r = *st.RunReason
	}
	if st.Delegation != nil && st.Delegation.Attempt > 0 {
		r.Attempt = st.Delegation.Attempt
	}
	return r
}

// List kinds of a packet, in the order that breaks ties between items of
// the same age (the earlier goes first).
const (
	listOutputs = iota
	listSteps
	listNotes
	listFacts
	listRisks
	listQuestions
	nLists
)

var listTrimNames = [nLists]string{trimOutputs, trimSteps, trimNotes, trimFacts, trimRisks, trimQuestions}

// packetItem is one element of a packet list while the budget is applied.
type packetItem struct {
	list    int
	age     int64 // the state version that produced it
	seq     int   // position in its list
	size    int   // bytes of its JSON encoding
	keep    bool  // never dropped
	dropped bool

	key   string // facts
	value any    // facts: the (possibly truncated) value
	elem  any    // the other lists: the (possibly truncated) element
}

type packetBuilder struct {
	max     int
	items   []packetItem
	trimmed []string
}

func (b *packetBuilder) mark(name string) {
	for _, t := range b.trimmed {
		if t == name {
			return
		}
	}
	b.trimmed = append(b.trimmed, name)
}

// fit returns s truncated so that its JSON encoding is at most limit bytes,
// marking name as trimmed when it had to cut.
func (b *packetBuilder) fit(name, s string, limit int) string {
	out, cut := fitString(s, limit)
	if cut {
		b.mark(name)
	}
	return out
}

// collect gathers the candidate items from the state, each measured and
// truncated to its share of the budget.
func (b *packetBuilder) collect(st State) {
	share := b.max / 4 // no single droppable item takes more
	protected := b.max / 8
	b.items = make([]packetItem, 0, min(len(st.CompletedSteps), packetOutputs)+packetSteps+len(st.Notes)+len(st.Facts)+packetRisks+packetQs)
	add := func(it *packetItem) {
		it.seq = len(b.items)
		b.items = append(b.items, *it)
	}

	var outs []PreviousOutput
	for _, s := range keepLast(st.CompletedSteps, packetOutputs) {
		if s.ResultType != ResultCompleted || (len(s.Output) == 0 && len(s.Evidence) == 0) {
			continue
		}
		outs = append(outs, PreviousOutput{Step: s.Step, Output: s.Output, Evidence: nonNil(s.Evidence), AtVersion: s.AtVersion})
	}
	if j := st.Joined; j != nil {
		for _, c := range j.Children {
			outs = append(outs, PreviousOutput{
				Step: "child " + c.SessionID, SessionID: c.SessionID, Status: c.Status, Goal: c.Goal,
				Output: c.Output, Evidence: nonNil(c.Evidence), AtVersion: j.AtVersion,
			})
		}
	}
	sort.SliceStable(outs, func(i, k int) bool { return outs[i].AtVersion < outs[k].AtVersion })
	for _, o := range outs {
		o, cut := shrinkOutput(o, share)
		if cut {
			b.mark(trimOutputs)
		}
		add(&packetItem{list: listOutputs, age: o.AtVersion, elem: o, size: encodedLen(o)})
	}

	for _, s := range keepLast(st.CompletedSteps, packetSteps) {
		ps := PacketStep{Step: b.fit(trimSteps, s.Step, share/2), ResultType: s.ResultType, NextStep: b.fit(trimSteps, s.NextStep, share/4)}
		add(&packetItem{list: listSteps, age: s.AtVersion, elem: ps, size: encodedLen(ps)})
	}

	notes := keepLast(st.Notes, packetNotes)
	for i, n := range notes {
		limit, keep := share, i == len(notes)-1
		if keep {
			limit = protected
		}
		pn := PacketNote{By: n.By, Text: n.Text, AtVersion: n.AtVersion}
		if over := encodedLen(pn) - limit; over > 0 {
			pn.Text = b.fit(trimNotes, pn.Text, max(32, encodedLen(pn.Text)-over))
		}
		add(&packetItem{list: listNotes, age: n.AtVersion, elem: pn, size: encodedLen(pn), keep: keep})
	}

	keys := make([]string, 0, len(st.Facts))
	for k := range st.Facts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, k int) bool {
		vi, vk := st.FactVersions[keys[i]], st.FactVersions[keys[k]]
		if vi != vk {
			return vi < vk
		}
		return keys[i] < keys[k]
	})
	for i, k := range keys {
		keep := i == len(keys)-1 || k == FactInputAnswer
		limit := share
		if keep {
			limit = protected
		}
		v := st.Facts[k]
		keyLen := encodedLen(k) + 1
		if vl := encodedLen(v); keyLen+vl > limit {
			s, ok := v.(string)
			if !ok {
				raw, _ := json.Marshal(v)
				s = string(raw)
			}
			v = b.fit(trimFacts, s, max(32, limit-keyLen))
		}
		add(&packetItem{list: listFacts, age: st.FactVersions[k], key: k, value: v, size: keyLen + encodedLen(v), keep: keep})
	}

	// Risks and open questions carry no version: they are as new as the
	// state, so they go after every versioned item of an older state.
	for _, r := range keepLast(st.Risks, packetRisks) {
		r = b.fit(trimRisks, r, share)
		add(&packetItem{list: listRisks, age: st.Version, elem: r, size: encodedLen(r)})
	}
	for _, q := range keepLast(st.OpenQuestions, packetQs) {
		q = b.fit(trimQuestions, q, share)
		add(&packetItem{list: listQuestions, age: st.Version, elem: q, size: encodedLen(q)})
	}
}

// shrinkOutput truncates a previous output to at most limit encoded bytes:
// the output first, then the oldest evidence.
func shrinkOutput(o PreviousOutput, limit int) (PreviousOutput, bool) {
	if encodedLen(o) <= limit {
		return o, false
	}
	if len(o.Output) > limit/2 {
		s, _ := fitString(string(o.Output), limit/2)
		o.Output, _ = json.Marshal(s)
	}
	o.Evidence = cloneSlice(o.Evidence)
	for len(o.Evidence) > 0 && encodedLen(o) > limit {
		o.Evidence = o.Evidence[1:]
	}
	if over := encodedLen(o) - limit; over > 0 {
		o.Goal, _ = fitString(o.Goal, max(32, encodedLen(o.Goal)-over))
	}
	if over := encodedLen(o) - limit; over > 0 {
		o.Step, _ = fitString(o.Step, max(32, encodedLen(o.Step)-over))
	}
	return o, true
}

// trim drops the oldest items until the packet fits, fills p's lists and
// budget, and squeezes the remaining fields if even that is not enough.
func (b *packetBuilder) trim(p *Packet) {
	// The skeleton is measured with the largest budget it can have (every
	// trimmed name, max digits), so the arithmetic below never undercounts.
	p.ConfirmedFacts, p.OpenQuestions, p.Notes = map[string]any{}, []string{}, []PacketNote{}
	p.PreviousOutputs, p.CompletedSteps, p.Risks = []PreviousOutput{}, []PacketStep{}, []string{}
	p.Budget = PacketBudget{MaxBytes: b.max, Bytes: b.max, Trimmed: allTrimNames}
	total := encodedLen(p)
	var count [nLists]int
	for _, it := range b.items {
		total += it.size
		if count[it.list] > 0 {
			total++ // the comma
		}
		count[it.list]++
	}
	if total > b.max {
		order := make([]*packetItem, 0, len(b.items))
		for i := range b.items {
			if !b.items[i].keep {
				order = append(order, &b.items[i])
			}
		}
		sort.SliceStable(order, func(i, k int) bool {
			if order[i].age != order[k].age {
				return order[i].age < order[k].age
			}
			return order[i].list < order[k].list
		})
		for _, it := range order {
			if total <= b.max {
				break
			}
			it.dropped = true
			total -= it.size
			if count[it.list] > 1 {
				total--
			}
			count[it.list]--
			b.mark(listTrimNames[it.list])
		}
	}
	for _, it := range b.items {
		if it.dropped {
			continue
		}
		switch it.list {
		case listOutputs:
			p.PreviousOutputs = append(p.PreviousOutputs, it.elem.(PreviousOutput))
		case listSteps:
			p.CompletedSteps = append(p.CompletedSteps, it.elem.(PacketStep))
		case listNotes:
			p.Notes = append(p.Notes, it.elem.(PacketNote))
		case listFacts:
			p.ConfirmedFacts[it.key] = it.value
		case listRisks:
			p.Risks = append(p.Risks, it.elem.(string))
		case listQuestions:
			p.OpenQuestions = append(p.OpenQuestions, it.elem.(string))
		}
	}
	worst := encodedLen(p.Budget)
	if total > b.max {
		b.squeeze(p)
		total = encodedLen(p) // with the worst budget, as squeeze left it
	}
	// total is exact (every size above is the length encoding/json writes);
	// swap the worst-case budget for the real one. Bytes counts itself:
	// settle on the length that includes its own digits.
	base := total - worst
	p.Budget = PacketBudget{MaxBytes: b.max, Trimmed: nonNil(b.trimmed)}
	for range 4 {
		n := base + encodedLen(p.Budget)
		if n == p.Budget.Bytes {
			break
		}
		p.Budget.Bytes = n
	}
}

// squeeze is the last resort when the fields that are never dropped (the
// stable fields, the instructions, the run reason, the newest fact and
// note) are together over the budget: it halves the longest string, again
// and again, and drops stable list items from the end once every string is
// short. It measures the real encoding each time; it only runs for
// pathological states.
func (b *packetBuilder) squeeze(p *Packet) {
	type slot struct {
		name string
		get  func() string
		set  func(string)
	}
	str := func(name string, s *string) slot {
		return slot{name, func() string { return *s }, func(v string) { *s = v }}
	}
	for range 10000 {
		p.Budget = PacketBudget{MaxBytes: b.max, Bytes: b.max, Trimmed: allTrimNames}
		if encodedLen(p) <= b.max {
			return
		}
		slots := []slot{str(trimGoal, &p.Goal), str(trimInstructions, &p.Instructions), str(trimStep, &p.Step),
			str(trimRunReason, &p.RunReason.Detail), str(trimRunReason, &p.RunReason.Question)}
		for i := range p.Constraints {
			slots = append(slots, str(trimConstraints, &p.Constraints[i]))
		}
		for i := range p.DoneCriteria {
			slots = append(slots, str(trimDone, &p.DoneCriteria[i]))
		}
		for i := range p.Resources {
			slots = append(slots, str(trimResources, &p.Resources[i].Name), str(trimResources, &p.Resources[i].URI))
		}
		for i := range p.Notes {
			slots = append(slots, str(trimNotes, &p.Notes[i].Text), str(trimNotes, &p.Notes[i].By))
		}
		for i := range p.OpenQuestions {
			slots = append(slots, str(trimQuestions, &p.OpenQuestions[i]))
		}
		for i := range p.Risks {
			slots = append(slots, str(trimRisks, &p.Risks[i]))
		}
		for k, v := range p.ConfirmedFacts {
			s, ok := v.(string)
			if !ok {
				raw, _ := json.Marshal(v)
				s = string(raw)
			}
			slots = append(slots, slot{trimFacts, func() string { return s }, func(x string) { p.ConfirmedFacts[k] = x }})
		}
		best, bestLen := -1, 64
		for i, s := range slots {
			if n := encodedLen(s.get()); n > bestLen {
				best, bestLen = i, n
			}
		}
		if best >= 0 {
			s := slots[best]
			v, _ := fitString(s.get(), bestLen/2)
			s.set(v)
			b.mark(s.name)
			continue
		}
		// Every string is short: drop stable list items, longest list first.
		switch n := max(len(p.Constraints), len(p.DoneCriteria), len(p.Resources)); {
		case n == 0:
			return // nothing left to cut; cannot happen for a validated state
		case len(p.Constraints) == n:
			p.Constraints = p.Constraints[:n-1]
			b.mark(trimConstraints)
		case len(p.DoneCriteria) == n:
			p.DoneCriteria = p.DoneCriteria[:n-1]
			b.mark(trimDone)
		default:
			p.Resources = p.Resources[:n-1]
			b.mark(trimResources)
		}
	}
}

// encodedLen is the length of v's JSON encoding (as encoding/json writes it,
// HTML-escaped, which is what the API sends). Strings and booleans, most of
// what a packet measures, are counted without encoding them.
func encodedLen(v any) int {
	switch x := v.(type) {
	case string:
		return jsonStringLen(x)
	case bool:
		if x {
			return 4
		}
		return 5
	case nil:
		return 4
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("models: packet part does not encode: " + err.Error())
	}
	return len(b)
}

// jsonStringLen is len(json.Marshal(s)) without the encoding: quotes, two
// bytes for the short escapes, six for \u escapes (control characters, HTML
// characters, U+2028 and U+2029, and each byte of invalid UTF-8, which
// becomes \ufffd). TestJSONStringLenProperty checks it against encoding/json.
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// truncMarker is what replaces the cut end of a truncated string.
func truncMarker(cut int) string { return " [... " + strconv.Itoa(cut) + " bytes cut]" }

// fitString returns s, or s cut at a rune boundary and marked with how many
// bytes were cut, so that its JSON encoding is at most limit bytes.
func fitString(s string, limit int) (string, bool) {
	if encodedLen(s) <= limit {
		return s, false
	}
	// The longest prefix that fits, by binary search over its length.
	lo, hi := 0, len(s)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		cut := runeStart(s, mid)
		if encodedLen(s[:cut]+truncMarker(len(s)-cut)) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	cut := runeStart(s, lo)
	return s[:cut] + truncMarker(len(s)-cut), true
}

// runeStart backs n up to the start of a rune of s.
func runeStart(s string, n int) int {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// PrefixHash hashes the stable part of the context: goal, constraints,
// resources and done criteria.
func PrefixHash(st State) string {
	b, err := Canonical(struct {
		Goal         string     `json:"goal"`
		Constraints  []string   `json:"constraints"`
		Resources    []Resource `json:"resources"`
		DoneCriteria []string   `json:"done_criteria"`
	}{st.Goal, nonNil(st.Constraints), nonNil(st.Resources), nonNil(st.DoneCriteria)})
	if err != nil {
		panic("models: prefix does not encode: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Prompt is a packet rendered as text for a model. Its first PrefixBytes
// bytes are the stable prefix (goal, constraints, resources, done criteria),
// identical from one run of the session to the next while those do not
// change, so that a model provider's prompt cache can reuse them;
// PrefixHash is the SHA-256 (hex) of exactly those bytes.
type Prompt struct {
	Text        string
	PrefixBytes int
	PrefixHash  string
}

// RenderPrompt renders the packet for a model: the stable prefix first, then
// why the worker runs, its step and instructions, and what was learned.
func RenderPrompt(p Packet) Prompt {
	var w strings.Builder
	list := func(title string, xs []string) {
		fmt.Fprintf(&w, "## %s\n", title)
		if len(xs) == 0 {
			w.WriteString("(none)\n")
		}
		for _, x := range xs {
			fmt.Fprintf(&w, "- %s\n", oneLine(x))
		}
		w.WriteString("\n")
	}
	fmt.Fprintf(&w, "# Goal\n%s\n\n", p.Goal)
	list("Constraints", p.Constraints)
	res := make([]string, len(p.Resources))
	for i, r := range p.Resources {
		res[i] = r.Name
		if r.URI != "" {
			res[i] += " <" + r.URI + ">"
		}
	}
	list("Resources", res)
	list("Done criteria", p.DoneCriteria)
	prefix := w.Len()

	fmt.Fprintf(&w, "# This run\nSession %s, state version %d, step %q, attempt %d.\n\n",
		p.SessionID, p.BasedOnVersion, p.Step, p.RunReason.Attempt)
	fmt.Fprintf(&w, "## Why you are running: %s\n", p.RunReason.Kind)
	if p.RunReason.Question != "" {
		fmt.Fprintf(&w, "Question: %s\n", p.RunReason.Question)
	}
	if p.RunReason.Detail != "" {
		label := "Detail"
		switch p.RunReason.Kind {
		case RunAfterInput:
			label = "Answer"
		case RunRetry:
			label = "Last failure"
		}
		fmt.Fprintf(&w, "%s: %s\n", label, p.RunReason.Detail)
	}
	w.WriteString("\n")
	if p.Instructions != "" {
		fmt.Fprintf(&w, "## Instructions\n%s\n\n", p.Instructions)
	}
	keys := make([]string, 0, len(p.ConfirmedFacts))
	for k := range p.ConfirmedFacts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	facts := make([]string, len(keys))
	for i, k := range keys {
		v, ok := p.ConfirmedFacts[k].(string)
		if !ok {
			raw, _ := json.Marshal(p.ConfirmedFacts[k])
			v = string(raw)
		}
		facts[i] = k + ": " + v
	}
	list("Confirmed facts", facts)
	list("Open questions", p.OpenQuestions)
	notes := make([]string, len(p.Notes))
	for i, n := range p.Notes {
		notes[i] = fmt.Sprintf("%s (version %d): %s", n.By, n.AtVersion, n.Text)
	}
	list("Notes from humans", notes)
	w.WriteString("## Previous outputs\n")
	if len(p.PreviousOutputs) == 0 {
		w.WriteString("(none)\n")
	}
	for _, o := range p.PreviousOutputs {
		fmt.Fprintf(&w, "### %s (version %d)", o.Step, o.AtVersion)
		if o.Status != "" {
			fmt.Fprintf(&w, ", %s", o.Status)
		}
		w.WriteString("\n")
		if o.Goal != "" {
			fmt.Fprintf(&w, "Goal: %s\n", oneLine(o.Goal))
		}
		if len(o.Output) > 0 {
			fmt.Fprintf(&w, "Output: %s\n", o.Output)
		}
		for _, e := range o.Evidence {
			fmt.Fprintf(&w, "- evidence: %s", oneLine(e.Claim))
			if e.Source != "" {
				fmt.Fprintf(&w, " (source: %s)", e.Source)
			}
			w.WriteString("\n")
		}
	}
	w.WriteString("\n")
	steps := make([]string, len(p.CompletedSteps))
	for i, s := range p.CompletedSteps {
		steps[i] = s.Step + ": " + s.ResultType
		if s.NextStep != "" {
			steps[i] += ", next " + s.NextStep
		}
	}
	list("Completed steps", steps)
	list("Risks", p.Risks)
	if len(p.Budget.Trimmed) > 0 {
		fmt.Fprintf(&w, "(Older context was trimmed to fit %d bytes: %s.)\n", p.Budget.MaxBytes, strings.Join(p.Budget.Trimmed, ", "))
	}
	text := w.String()
	sum := sha256.Sum256([]byte(text[:prefix]))
	return Prompt{Text: text, PrefixBytes: prefix, PrefixHash: hex.EncodeToString(sum[:])}
}

// oneLine keeps a list item on one line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}
