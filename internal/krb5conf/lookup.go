package krb5conf

// Values returns every value of the relation path[len(path)-1] in the section
// path[:len(path)-1] (for example "realms", "EXAMPLE.COM", "kdc"), as MIT's
// profile_get_values does (prof_tree.c profile_node_iterator): the values of
// each tree in KRB5_CONFIG order, within a tree in read order; after a tree in
// which one of the sections on the path, or one of the values, is final, later
// trees are not looked at. Names compare byte for byte (case matters). It
// returns nil when there is no such relation, or path has fewer than two names.
func (p *Profile) Values(path ...string) []string {
	if p == nil || len(path) < 2 {
		return nil
	}
	secPath, tag := path[:len(path)-1], path[len(path)-1]
	var out []string
	for _, root := range p.trees {
		sec, final := lookupSection(root, secPath)
		if sec == nil {
			continue
		}
		if e := sec.byName[tag]; e != nil {
			for _, c := range e.rels {
				out = append(out, *c.value)
			}
			final = final || e.relFinal
		}
		if final {
			break
		}
	}
	return out
}

// Value returns the first of Values(path...): what MIT's profile_get_string
// and the single-valued lookups of libkrb5 see. ok is false if there is none.
func (p *Profile) Value(path ...string) (value string, ok bool) {
	v := p.Values(path...)
	if len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// Sections returns the names of the subsections of the section path (for
// example "realms"), each once, in the order MIT lists them
// (profile_get_subsection_names): per tree, sorted byte-wise; trees in
// KRB5_CONFIG order, stopping after a tree where the section is final.
func (p *Profile) Sections(path ...string) []string {
	return p.children(path, true)
}

// Relations returns the tags of the relations in the section path (for example
// "domain_realm"), each once, in the order of Sections.
func (p *Profile) Relations(path ...string) []string {
	return p.children(path, false)
}

func (p *Profile) children(path []string, sections bool) []string {
	if p == nil || len(path) == 0 {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, root := range p.trees {
		sec, final := lookupSection(root, path)
		if sec == nil {
			continue
		}
		for _, name := range sec.names { // sorted
			e := sec.byName[name]
			if (sections && e.sec != nil || !sections && len(e.rels) > 0) && !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
		if final {
			break
		}
	}
	return out
}

// lookupSection follows path from root; final reports a final section on the way.
func lookupSection(root *node, path []string) (sec *node, final bool) {
	sec = root
	for _, name := range path {
		if sec = sec.section(name); sec == nil {
			return nil, false
		}
		final = final || sec.final
	}
	return sec, final
}

// LibDefault returns the first value of name in [libdefaults]. Realm-specific
// subsections of [libdefaults] (MIT's "[libdefaults] REALM = { ... }") are not
// consulted.
func (p *Profile) LibDefault(name string) (string, bool) {
	return p.Value("libdefaults", name)
}

// DefaultCCacheName returns [libdefaults] default_ccache_name as written: the
// %{...} tokens are not expanded (MIT expands them in krb5_cc_default_name,
// os/ccdefname.c and os/expand_path.c).
func (p *Profile) DefaultCCacheName() (string, bool) {
	return p.LibDefault("default_ccache_name")
}

// KCMSocket returns [libdefaults] kcm_socket: the path of the KCM daemon's Unix
// socket, or "-" for no KCM (cc_kcm.c). MIT's default, when ok is false, is
// /var/run/.heim_org.h5l.kcm-socket.
func (p *Profile) KCMSocket() (string, bool) {
	return p.LibDefault("kcm_socket")
}
