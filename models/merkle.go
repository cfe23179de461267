package models

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
)

// The Merkle tree of a checkpoint is the tree of RFC 6962 (Certificate
// Transparency) and RFC 9162, section 2.1: leaf hash SHA-256(0x00 || leaf),
// node hash SHA-256(0x01 || left || right), a tree of n leaves split at the
// largest power of two below n. Using the published construction means an
// outside verifier can check an inclusion proof with any CT library (Go's
// golang.org/x/mod/sumdb/tlog.CheckRecord is one; a test checks ours
// against it).

// MerkleHash is one SHA-256 hash in the tree.
type MerkleHash [sha256.Size]byte

// String is the lowercase hex of h.
func (h MerkleHash) String() string { return hex.EncodeToString(h[:]) }

// ParseMerkleHash reads a hash in lowercase or uppercase hex.
func ParseMerkleHash(s string) (MerkleHash, error) {
	var h MerkleHash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("%q is not a hex SHA-256 hash", s)
	}
	copy(h[:], b)
	return h, nil
}

// CheckpointLeaf is the text hashed into a session's leaf: its id, its number
// of events and the hash of its last event, each ending in a newline.
func CheckpointLeaf(sessionID string, events int64, head string) []byte {
	b := make([]byte, 0, len(sessionID)+len(head)+24)
	b = append(b, sessionID...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, events, 10)
	b = append(b, '\n')
	b = append(b, head...)
	return append(b, '\n')
}

// LeafHash is SHA-256(0x00 || leaf).
func LeafHash(leaf []byte) MerkleHash {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(leaf)
	var out MerkleHash
	h.Sum(out[:0])
	return out
}

// nodeHash is SHA-256(0x01 || left || right).
func nodeHash(l, r MerkleHash) MerkleHash {
	h := sha256.New()
	h.Write([]byte{1})
	h.Write(l[:])
	h.Write(r[:])
	var out MerkleHash
	h.Sum(out[:0])
	return out
}

// emptyRoot is the root of a tree without leaves: SHA-256 of nothing.
var emptyRoot = MerkleHash(sha256.Sum256(nil))

// merkleBuilder computes the root of leaves added in order, keeping only the
// roots of the complete subtrees so far (at most log2(n) hashes), so that a
// checkpoint over any number of sessions is computed while streaming them.
type merkleBuilder struct {
	stack []merkleNode
	n     int64
}

type merkleNode struct {
	h    MerkleHash
	size int64
}

func (b *merkleBuilder) add(leaf MerkleHash) {
	b.n++
	b.stack = append(b.stack, merkleNode{leaf, 1})
	for len(b.stack) >= 2 {
		l, r := b.stack[len(b.stack)-2], b.stack[len(b.stack)-1]
		if l.size != r.size {
			break
		}
		b.stack = b.stack[:len(b.stack)-2]
		b.stack = append(b.stack, merkleNode{nodeHash(l.h, r.h), l.size * 2})
	}
}

// root folds the complete subtrees from the right: the subtrees' sizes are
// the binary digits of n, largest first, which is exactly RFC 6962's split.
func (b *merkleBuilder) root() MerkleHash {
	if len(b.stack) == 0 {
		return emptyRoot
	}
	r := b.stack[len(b.stack)-1].h
	for i := len(b.stack) - 2; i >= 0; i-- {
		r = nodeHash(b.stack[i].h, r)
	}
	return r
}

// merkleRoot is the root of leaves.
func merkleRoot(leaves []MerkleHash) MerkleHash {
	var b merkleBuilder
	for _, l := range leaves {
		b.add(l)
	}
	return b.root()
}

// InclusionProof returns the audit path of leaf m among leaves (RFC 6962
// PATH(m, D[n])): sibling subtree roots from the leaf's level up.
func InclusionProof(leaves []MerkleHash, m int64) ([]MerkleHash, error) {
	n := int64(len(leaves))
	if m < 0 || m >= n {
		return nil, fmt.Errorf("leaf %d of a tree of %d", m, n)
	}
	var path func(lo, hi int64) []MerkleHash
	path = func(lo, hi int64) []MerkleHash {
		if hi-lo == 1 {
			return nil
		}
		k := splitPoint(hi - lo)
		if m < lo+k {
			return append(path(lo, lo+k), merkleRoot(leaves[lo+k:hi]))
		}
		return append(path(lo+k, hi), merkleRoot(leaves[lo:lo+k]))
	}
	return path(0, n), nil
}

// splitPoint is the largest power of two smaller than n (n > 1).
func splitPoint(n int64) int64 {
	return 1 << (bits.Len64(uint64(n-1)) - 1)
}

// ErrInclusion is returned when an inclusion proof does not lead to the root.
var ErrInclusion = errors.New("inclusion proof does not lead to the signed root")

// VerifyInclusion checks that leaf is leaf m of the tree of n leaves with
// root, by the algorithm of RFC 9162, section 2.1.3.2.
func VerifyInclusion(leaf MerkleHash, m, n int64, proof []MerkleHash, root MerkleHash) error {
	if m < 0 || m >= n {
		return fmt.Errorf("leaf index %d outside a tree of %d: %w", m, n, ErrInclusion)
	}
	fn, sn := m, n-1
	r := leaf
	for _, p := range proof {
		if sn == 0 {
			return fmt.Errorf("proof too long: %w", ErrInclusion)
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = nodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 || r != root {
		return ErrInclusion
	}
	return nil
}
