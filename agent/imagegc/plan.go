package imagegc

// Which images may go, and in which order: the pure part of the collector,
// kept apart from the engine so that it is tested on its own.

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"time"
)

// MaxKeep bounds how many --image-keep patterns the agent takes, and
// MaxPatternLen how long each may be: they are matched against every tag of
// every image on every pass.
const (
	MaxKeep       = 64
	MaxPatternLen = 256
)

// Pattern is one --image-keep glob, matched against an image's repository
// and tag.
type Pattern struct {
	text      string
	repo, tag string
}

func (p Pattern) String() string { return p.text }

// ParsePattern reads an --image-keep pattern: a glob (path.Match: * and ?
// within one path segment, [...] classes) on repo:tag, as `docker images`
// shows them: "alpine:*", "registry.example.com/base/*". A pattern without a
// tag matches every tag of the repositories it names ("alpine" is
// "alpine:*"). Docker Hub's images match in their short form and in their
// full one ("docker.io/library/alpine:3").
func ParsePattern(s string) (Pattern, error) {
	switch {
	case strings.TrimSpace(s) == "":
		return Pattern{}, fmt.Errorf("an empty image pattern: give a glob on repo:tag, e.g. alpine:* or registry.example.com/base/*")
	case len(s) > MaxPatternLen:
		return Pattern{}, fmt.Errorf("image pattern %.40q… is longer than %d bytes: give a shorter glob", s, MaxPatternLen)
	case strings.ContainsAny(s, " \t\r\n"):
		return Pattern{}, fmt.Errorf("image pattern %q holds white space, which no image name does", s)
	}
	p := Pattern{text: s, repo: s, tag: "*"}
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		p.repo, p.tag = s[:i], s[i+1:]
	}
	if p.repo == "" || p.tag == "" {
		return Pattern{}, fmt.Errorf("image pattern %q: give both a repository and a tag glob, e.g. alpine:*", s)
	}
	for _, g := range []string{p.repo, p.tag} {
		if _, err := path.Match(g, ""); err != nil {
			return Pattern{}, fmt.Errorf("image pattern %q is not a valid glob (%v): use * and ? and [...] classes, e.g. alpine:*", s, err)
		}
	}
	return p, nil
}

// ParsePatterns reads a list of patterns, refusing more than MaxKeep.
func ParsePatterns(ss []string) ([]Pattern, error) {
	if len(ss) > MaxKeep {
		return nil, fmt.Errorf("%d image patterns given; at most %d are taken: combine them with globs", len(ss), MaxKeep)
	}
	out := make([]Pattern, 0, len(ss))
	for _, s := range ss {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// matches says whether the image named repo with tag (empty for a name by
// digest) is one the pattern keeps.
func (p Pattern) matches(repo, tag string) bool {
	if tag == "" && p.tag != "*" {
		return false
	}
	if tag != "" {
		if ok, _ := path.Match(p.tag, tag); !ok {
			return false
		}
	}
	for _, r := range repoForms(repo) {
		if ok, _ := path.Match(p.repo, r); ok {
			return true
		}
	}
	return false
}

// repoForms is a repository as the engine names it and, for Docker Hub's,
// in its full form too.
func repoForms(repo string) []string {
	first, _, found := strings.Cut(repo, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return []string{repo}
	}
	if !found {
		return []string{repo, "docker.io/library/" + repo}
	}
	return []string{repo, "docker.io/" + repo}
}

// Image is what the collector knows of one image in the engine.
type Image struct {
	ID string
	// Tags are its repo:tag names, Digests its repo@digest ones.
	Tags, Digests []string
	Size          int64
	// LastUsed is when a task or sidecar on this node last used it, or
	// when the agent first saw it.
	LastUsed time.Time
}

// Name is how the image is named in logs: its first tag, else its first
// digest, else its id.
func (im Image) Name() string {
	switch {
	case len(im.Tags) > 0:
		return im.Tags[0]
	case len(im.Digests) > 0:
		return im.Digests[0]
	}
	return im.ID
}

// kept says whether one of the patterns keeps the image.
func kept(im Image, keep []Pattern) bool {
	for _, p := range keep {
		for _, t := range im.Tags {
			i := strings.LastIndexByte(t, ':')
			if i > strings.LastIndexByte(t, '/') && p.matches(t[:i], t[i+1:]) {
				return true
			}
		}
		for _, d := range im.Digests {
			if repo, _, ok := strings.Cut(d, "@"); ok && p.matches(repo, "") {
				return true
			}
		}
	}
	return false
}

// Plan lists the images that may be removed, in the order to remove them:
// unused for at least unused at now, kept by no pattern and not protected
// (an image id), least recently used first; between two used at the same
// time, the larger first, which frees more for one removal. Whether a task
// on the node needs an image is asked later, just before each removal,
// because it changes while the collector works.
func Plan(imgs []Image, now time.Time, unused time.Duration, keep []Pattern, protect map[string]bool) []Image {
	var out []Image
	for _, im := range imgs {
		if now.Sub(im.LastUsed) < unused || protect[im.ID] || kept(im, keep) {
			continue
		}
		out = append(out, im)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.LastUsed.Equal(b.LastUsed) {
			return a.LastUsed.Before(b.LastUsed)
		}
		if a.Size != b.Size {
			return a.Size > b.Size
		}
		return a.ID < b.ID
	})
	return out
}
