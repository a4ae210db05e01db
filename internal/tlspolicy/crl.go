package tlspolicy

import (
	"bytes"
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"path/filepath"
	"slices"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxCRLFile bounds a CRL file (sslcrl, or one of sslcrldir), checked before it is read: only a
// regular file is read (a FIFO or a device is refused, not opened for a wait).
const MaxCRLFile = 64 << 20

// ReadFunc reads the regular file at path, of at most limit bytes, without waiting on a FIFO or
// a device; errors are *fs.PathError (fs.ErrNotExist for a file that is not there).
type ReadFunc func(path string, limit int64) ([]byte, error)

// CRLStore is what OpenSSL's X509_STORE holds for libpq: the CRLs of the file (sslcrl), and the
// directories (sslcrldir) where more are looked up by issuer.
type CRLStore struct {
	file     []*crl
	dirs     []string
	read     ReadFunc
	sawDelta bool // lookup returned a delta CRL
	// found is what lookup returned for each issuer (canonical name) during one Check: the
	// directories are read once per issuer, however many chains and certificates name it.
	found map[string][]*crl
}

// NewCRLStore returns the store of the CRLs in file, the contents of an sslcrl file (PEM "X509
// CRL" blocks, or one DER CRL; nil for none), and of the directories dirs, whose files are read
// with read when a certificate's issuer is looked up. objects counts the CRLs and the PEM
// certificates of file, which OpenSSL loads too: libpq checks no CRL when an sslcrl file holds
// none. A CRL of file that does not parse is an error ("a certificate revocation list does not
// parse: ...", or "holds neither a PEM nor a DER certificate revocation list"), without the path.
func NewCRLStore(file []byte, dirs []string, read ReadFunc) (s *CRLStore, objects int, err error) {
	crls, objects, err := parseCRLFile(file)
	if err != nil {
		return nil, 0, err
	}
	return &CRLStore{file: crls, dirs: dirs, read: read}, objects, nil
}

// Check checks the verified chains of the server's certificate (each leaf first, root last)
// against the CRLs: nil when one chain passes (see checkChain), else the error of the first,
// "certificate verify failed: REASON (certificate at depth N, SUBJECT)"
// with OpenSSL's reason (X509_verify_cert_error_string). Every certificate of a chain needs a
// CRL of its issuer, the root's included: a chain must end at a self-signed (self-issued)
// certificate, as OpenSSL builds it without X509_V_FLAG_PARTIAL_CHAIN; one that ends at another
// fails there with "unable to get CRL issuer certificate" when CRLs of that certificate's issuer
// are loaded, else "unable to get certificate CRL".
func (s *CRLStore) Check(chains [][]*x509.Certificate, now time.Time) error {
	if len(chains) == 0 {
		return errors.New("certificate verify failed: no verified chain to check against the CRLs")
	}
	// Go may find several chains (cross-signed CAs); OpenSSL builds one. One that passes is enough.
	s.found = nil
	var first error
	for _, chain := range chains {
		err := s.checkChain(chain, now)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// NameHash is the name under which "openssl rehash" files a CRL of an issuer in a directory
// (sslcrldir: NAMEHASH.r0, .r1, ...), and "openssl x509 -hash" prints: OpenSSL's
// X509_NAME_hash_ex of the DER Name's canonical form, 8 hex digits. It fails for a name that
// does not parse.
func NameHash(name []byte) (string, error) {
	canon, err := canonicalName(name)
	if err != nil {
		return "", err
	}
	return nameHash(canon), nil
}

// parseCRLFile reads the CRLs of an sslcrl file, PEM ("X509 CRL" blocks) or one DER CRL, and
// counts them with the PEM certificates of the file, which OpenSSL loads too.
func parseCRLFile(data []byte) (crls []*crl, objects int, err error) {
	rest, sawPEM := data, false
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		sawPEM = true
		switch b.Type {
		case "X509 CRL":
			c, err := parseCRL(b.Bytes)
			if err != nil {
				return nil, 0, err
			}
			crls = append(crls, c)
			objects++
		case "CERTIFICATE", "X509 CERTIFICATE", "TRUSTED CERTIFICATE":
			objects++
		}
	}
	if !sawPEM && len(bytes.TrimSpace(data)) > 0 {
		c, err := parseCRL(data)
		if err != nil {
			return nil, 0, errors.New("holds neither a PEM nor a DER certificate revocation list")
		}
		return []*crl{c}, 1, nil
	}
	return crls, objects, nil
}

// lookup returns the CRLs issued by the name (canonical form): those of the file, then those of
// the directories (X509_STORE_CTX_get1_crls always looks in the directories too).
func (s *CRLStore) lookup(issuer []byte) []*crl {
	if out, ok := s.found[string(issuer)]; ok {
		return out
	}
	var out []*crl
	for _, c := range s.file {
		if bytes.Equal(c.issuer, issuer) {
			out = append(out, c)
		}
	}
	hash := nameHash(issuer)
	for _, dir := range s.dirs {
		// by_dir.c: <hash>.r0, .r1, ... up to the first that is missing or does not load.
		for n := 0; ; n++ {
			data, err := s.read(filepath.Join(dir, hash+".r"+strconv.Itoa(n)), MaxCRLFile)
			if err != nil {
				break
			}
			crls, _, err := parseCRLFile(data)
			if err != nil || len(crls) == 0 {
				break
			}
			for _, c := range crls {
				if bytes.Equal(c.issuer, issuer) {
					out = append(out, c)
				}
			}
		}
	}
	for _, c := range out {
		s.sawDelta = s.sawDelta || c.delta
	}
	if s.found == nil {
		s.found = map[string][]*crl{}
	}
	s.found[string(issuer)] = out
	return out
}

// crl is a parsed CRL with what OpenSSL's CRL scoring looks at.
type crl struct {
	rl     *x509.RevocationList
	issuer []byte // canonical issuer name
	// critical: an extension OpenSSL does not handle is critical (EXFLAG_CRITICAL).
	critical bool
	// delta: the CRL has a deltaCRLIndicator (RFC 5280, 5.2.4). OpenSSL 3.0 scores it as a
	// complete CRL (see CRLStore.checkChain).
	delta bool
	// unusable: an indirect CRL, a CRL for some reasons only, or an invalid
	// issuingDistributionPoint or authorityKeyIdentifier: OpenSSL never uses it with libpq's
	// flags.
	unusable bool
	idp      *issuingDP
	akid     *authorityKeyID // nil when the CRL has none
}

// authorityKeyID is a CRL's authorityKeyIdentifier (RFC 5280, 4.2.1.1, 5.2.1) as X509_check_akid
// compares it with the issuer's certificate; crypto/x509 keeps only the key identifier.
type authorityKeyID struct {
	keyID  []byte   // nil when absent
	issuer []byte   // canonical form of the first directoryName of authorityCertIssuer; nil when none
	serial *big.Int // authorityCertSerialNumber; nil when absent
}

// matches is X509_check_akid: each part present must match the issuer's certificate (subject
// key identifier, when it has one; serial number; issuer name).
func (a *authorityKeyID) matches(issuer *x509.Certificate) bool {
	if a == nil {
		return true
	}
	if a.keyID != nil && len(issuer.SubjectKeyId) > 0 && !bytes.Equal(a.keyID, issuer.SubjectKeyId) {
		return false
	}
	if a.serial != nil && a.serial.Cmp(issuer.SerialNumber) != 0 {
		return false
	}
	if a.issuer != nil {
		if name, err := canonicalName(issuer.RawIssuer); err != nil || !bytes.Equal(name, a.issuer) {
			return false
		}
	}
	return true
}

// parseAKID reads an authorityKeyIdentifier; ok is false when it does not parse.
func parseAKID(der []byte) (a *authorityKeyID, ok bool) {
	var seq asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &seq); err != nil || len(rest) > 0 || seq.Tag != asn1.TagSequence {
		return nil, false
	}
	a = &authorityKeyID{}
	for b := seq.Bytes; len(b) > 0; {
		var f asn1.RawValue
		var err error
		if b, err = asn1.Unmarshal(b, &f); err != nil || f.Class != asn1.ClassContextSpecific {
			return nil, false
		}
		switch f.Tag {
		case 0: // keyIdentifier
			a.keyID = slices.Clip(f.Bytes)
		case 1: // authorityCertIssuer GeneralNames
			gns, err := parseGeneralNames(f.Bytes)
			if err != nil {
				return nil, false
			}
			if k := slices.IndexFunc(gns, func(g generalName) bool { return g.dir }); k >= 0 {
				if a.issuer = gns[k].canon; a.issuer == nil {
					return nil, false
				}
			}
		case 2: // authorityCertSerialNumber INTEGER, two's complement
			if len(f.Bytes) == 0 {
				return nil, false
			}
			a.serial = new(big.Int).SetBytes(f.Bytes)
			if f.Bytes[0]&0x80 != 0 {
				a.serial.Sub(a.serial, new(big.Int).Lsh(big.NewInt(1), uint(8*len(f.Bytes))))
			}
		}
	}
	return a, true
}

// issuingDP is what OpenSSL takes from a CRL's issuingDistributionPoint (RFC 5280, 5.2.5).
type issuingDP struct {
	dp                         *dpName // nil when the IDP names no distribution point
	onlyUser, onlyCA, onlyAttr bool
}

// dpName is a DistributionPointName (RFC 5280, 4.2.1.13): a fullName, or a name relative to
// the CRL issuer, which OpenSSL completes (DIST_POINT_set_dpname) into the canonical form of
// the issuer's name followed by the RDN.
type dpName struct {
	full     []generalName
	relative []byte // nameRelativeToCRLIssuer: the canonical form of the completed name
}

// generalName is a GeneralName as GENERAL_NAME_cmp compares it: a directoryName by its canonical
// form (X509_NAME_cmp), any other by its DER encoding.
type generalName struct {
	der   []byte
	dir   bool   // a directoryName
	name  []byte // directoryName: the DER Name
	canon []byte // directoryName: its canonical form; nil when it does not parse (equal to nothing)
}

func (a generalName) equal(b generalName) bool {
	if a.dir || b.dir {
		return a.dir && b.dir && a.canon != nil && b.canon != nil && bytes.Equal(a.canon, b.canon)
	}
	return bytes.Equal(a.der, b.der)
}

// distPoint is a certificate's DistributionPoint (RFC 5280, 4.2.1.13) as OpenSSL's setup_dp
// reads it.
type distPoint struct {
	name       *dpName       // nil when absent
	reasons    uint16        // OpenSSL's dp_reasons: allReasons when absent
	crlIssuer  []generalName // nil when absent
	issuerName []byte        // DER Name a relative name is relative to: cRLIssuer's first directoryName, else the certificate's issuer
}

var (
	oidAKID       = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidIDP        = asn1.ObjectIdentifier{2, 5, 29, 28}
	oidDeltaCRL   = asn1.ObjectIdentifier{2, 5, 29, 27}
	oidCertIssuer = asn1.ObjectIdentifier{2, 5, 29, 29}
	oidCRLDP      = asn1.ObjectIdentifier{2, 5, 29, 31}
	oidEKU        = asn1.ObjectIdentifier{2, 5, 29, 37}
)

// allReasons is OpenSSL's CRLDP_ALL_REASONS: the ReasonFlags bits keyCompromise to
// privilegeWithdrawn (first byte) and aACompromise (second byte), read as dp_reasons reads them.
const allReasons = 0x807f

// reasonRemoveFromCRL is the CRL reason removeFromCRL: the entry does not revoke (cert_crl).
const reasonRemoveFromCRL = 8

func parseCRL(der []byte) (*crl, error) {
	rl, err := parseRevocationList(der)
	if err != nil {
		return nil, fmt.Errorf("a certificate revocation list does not parse: %w", err)
	}
	issuer, err := canonicalName(rl.RawIssuer)
	if err != nil {
		return nil, fmt.Errorf("a certificate revocation list does not parse: issuer: %w", err)
	}
	c := &crl{rl: rl, issuer: issuer}
	for _, e := range rl.Extensions {
		switch {
		case e.Id.Equal(oidDeltaCRL):
			c.delta = true
		case e.Id.Equal(oidAKID):
			akid, ok := parseAKID(e.Value)
			if !ok {
				c.unusable = true
			}
			c.akid = akid
		case e.Id.Equal(oidIDP):
			idp, ok := parseIDP(e.Value, rl.RawIssuer)
			if !ok {
				c.unusable = true
			}
			c.idp = idp
		case e.Critical && !e.Id.Equal(oidAKID):
			c.critical = true
		}
	}
	for _, entry := range rl.RevokedCertificateEntries {
		for _, e := range entry.Extensions {
			if e.Critical && !e.Id.Equal(oidCertIssuer) {
				c.critical = true
			}
		}
	}
	return c, nil
}

// parseRevocationList parses the DER CRL der (RFC 5280, 5.1) of version 1 or 2, as OpenSSL reads
// both (x_crl.c: the version is OPTIONAL). crypto/x509 parses version 2 only ("unsupported crl
// version"): a CRL without a version field, as "openssl ca -gencrl" writes one when it adds no
// extension, or with the version v1 (0) written out, is handed to it with the version v2 put in
// its TBSCertList, which leaves every other field as it is; the list returned keeps the CRL's
// own encoding (Raw, RawTBSRevocationList), which its signature covers.
func parseRevocationList(der []byte) (*x509.RevocationList, error) {
	malformed := errors.New("x509: malformed crl")
	var list asn1.RawValue
	if _, err := asn1.Unmarshal(der, &list); err != nil || list.Class != asn1.ClassUniversal || list.Tag != asn1.TagSequence || !list.IsCompound {
		return x509.ParseRevocationList(der) // its own error
	}
	var tbs asn1.RawValue
	after, err := asn1.Unmarshal(list.Bytes, &tbs)
	if err != nil || tbs.Class != asn1.ClassUniversal || tbs.Tag != asn1.TagSequence || !tbs.IsCompound {
		return x509.ParseRevocationList(der)
	}
	var first asn1.RawValue
	rest, err := asn1.Unmarshal(tbs.Bytes, &first)
	if err != nil {
		return nil, malformed
	}
	fields := tbs.Bytes // the fields after the version, when it is v1 or absent
	if first.Class == asn1.ClassUniversal && first.Tag == asn1.TagInteger {
		if !bytes.Equal(first.Bytes, []byte{0}) {
			return x509.ParseRevocationList(der) // v2, or a version crypto/x509 refuses
		}
		fields = rest
	}
	v2, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true,
		Bytes: append([]byte{asn1.TagInteger, 1, 1}, fields...)})
	if err != nil {
		return nil, malformed
	}
	rebuilt, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true,
		Bytes: append(v2, after...)})
	if err != nil {
		return nil, malformed
	}
	rl, err := x509.ParseRevocationList(rebuilt)
	if err != nil {
		return nil, err
	}
	rl.Raw, rl.RawTBSRevocationList = list.FullBytes, tbs.FullBytes
	return rl, nil
}

// parseIDP reads an issuingDistributionPoint (RFC 5280, 5.2.5) of a CRL issued by issuer (DER
// Name); ok is false when OpenSSL does not use the CRL with libpq's flags (indirect, some
// reasons only, invalid).
func parseIDP(der, issuer []byte) (*issuingDP, bool) {
	var seq asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &seq); err != nil || len(rest) > 0 || seq.Tag != asn1.TagSequence {
		return nil, false
	}
	idp := &issuingDP{}
	only := 0
	for b := seq.Bytes; len(b) > 0; {
		var f asn1.RawValue
		var err error
		if b, err = asn1.Unmarshal(b, &f); err != nil || f.Class != asn1.ClassContextSpecific {
			return nil, false
		}
		flag := len(f.Bytes) == 1 && f.Bytes[0] != 0
		switch f.Tag {
		case 0: // distributionPoint
			if idp.dp, err = parseDPName(f.Bytes, issuer); err != nil {
				return nil, false
			}
		case 1:
			idp.onlyUser = flag
		case 2:
			idp.onlyCA = flag
		case 3: // onlySomeReasons
			return idp, false
		case 4: // indirectCRL
			if flag {
				return idp, false
			}
		case 5:
			idp.onlyAttr = flag
		}
		if flag && (f.Tag == 1 || f.Tag == 2 || f.Tag == 5) {
			only++
		}
	}
	return idp, only <= 1
}

// parseDPName reads a DistributionPointName (the content of its explicit [0] tag); a relative
// name is taken relative to issuer (DER Name).
func parseDPName(der, issuer []byte) (*dpName, error) {
	var choice asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &choice); err != nil || len(rest) > 0 || choice.Class != asn1.ClassContextSpecific {
		return nil, errors.New("malformed distribution point name")
	}
	switch choice.Tag {
	case 0: // fullName GeneralNames
		full, err := parseGeneralNames(choice.Bytes)
		if err != nil {
			return nil, err
		}
		return &dpName{full: full}, nil
	case 1: // nameRelativeToCRLIssuer RelativeDistinguishedName
		set, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true, Bytes: choice.Bytes})
		if err != nil {
			return nil, err
		}
		var name asn1.RawValue
		if rest, err := asn1.Unmarshal(issuer, &name); err != nil || len(rest) > 0 || name.Tag != asn1.TagSequence {
			return nil, errors.New("malformed name")
		}
		full, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true,
			Bytes: append(slices.Clip(name.Bytes), set...)})
		if err != nil {
			return nil, err
		}
		canon, err := canonicalName(full)
		if err != nil {
			return nil, err
		}
		return &dpName{relative: canon}, nil
	}
	return nil, errors.New("malformed distribution point name")
}

// parseGeneralNames reads the content of a GeneralNames (RFC 5280, 4.2.1.6).
func parseGeneralNames(der []byte) ([]generalName, error) {
	var out []generalName
	for len(der) > 0 {
		var gn asn1.RawValue
		var err error
		if der, err = asn1.Unmarshal(der, &gn); err != nil || gn.Class != asn1.ClassContextSpecific {
			return nil, errors.New("malformed general name")
		}
		g := generalName{der: gn.FullBytes}
		if gn.Tag == 4 { // directoryName: an explicit Name
			g.dir, g.name = true, gn.Bytes
			g.canon, _ = canonicalName(gn.Bytes)
		}
		out = append(out, g)
	}
	return out, nil
}

// certDistPoints reads the cRLDistributionPoints of cert (RFC 5280, 4.2.1.13) as OpenSSL's
// setup_crldp does; crypto/x509 keeps only their URIs. A distribution point with neither name
// nor cRLIssuer, or one that does not parse, makes the certificate invalid in OpenSSL
// (EXFLAG_INVALID, X509_V_ERR_INVALID_EXTENSION).
func certDistPoints(cert *x509.Certificate) ([]distPoint, error) {
	invalid := errors.New("invalid or inconsistent certificate extension: cRLDistributionPoints")
	var dps []distPoint
	for _, e := range cert.Extensions {
		if !e.Id.Equal(oidCRLDP) {
			continue
		}
		var seq asn1.RawValue
		if rest, err := asn1.Unmarshal(e.Value, &seq); err != nil || len(rest) > 0 || seq.Tag != asn1.TagSequence {
			return nil, invalid
		}
		for b := seq.Bytes; len(b) > 0; {
			var dpSeq asn1.RawValue
			var err error
			if b, err = asn1.Unmarshal(b, &dpSeq); err != nil || dpSeq.Tag != asn1.TagSequence {
				return nil, invalid
			}
			dp := distPoint{reasons: allReasons, issuerName: cert.RawIssuer}
			var nameDER []byte
			for f := dpSeq.Bytes; len(f) > 0; {
				var field asn1.RawValue
				if f, err = asn1.Unmarshal(f, &field); err != nil || field.Class != asn1.ClassContextSpecific {
					return nil, invalid
				}
				switch field.Tag {
				case 0: // distributionPoint
					nameDER = field.Bytes
				case 1: // reasons: ReasonFlags BIT STRING, implicit
					if len(field.Bytes) == 0 || field.Bytes[0] > 7 {
						return nil, invalid
					}
					bits := slices.Clone(field.Bytes[1:])
					if len(bits) > 0 {
						bits[len(bits)-1] &= 0xff << field.Bytes[0]
					}
					dp.reasons = 0
					if len(bits) > 0 {
						dp.reasons = uint16(bits[0])
					}
					if len(bits) > 1 {
						dp.reasons |= uint16(bits[1]) << 8
					}
					dp.reasons &= allReasons
				case 2: // cRLIssuer GeneralNames, implicit
					if dp.crlIssuer, err = parseGeneralNames(field.Bytes); err != nil {
						return nil, invalid
					}
					if dp.crlIssuer == nil {
						dp.crlIssuer = []generalName{}
					}
					if k := slices.IndexFunc(dp.crlIssuer, func(g generalName) bool { return g.dir }); k >= 0 {
						dp.issuerName = dp.crlIssuer[k].name
					}
				}
			}
			if nameDER == nil && len(dp.crlIssuer) == 0 {
				return nil, invalid
			}
			if nameDER != nil {
				if dp.name, err = parseDPName(nameDER, dp.issuerName); err != nil {
					return nil, invalid
				}
			}
			dps = append(dps, dp)
		}
	}
	return dps, nil
}

// OpenSSL's CRL scores (x509_vfy.c).
const (
	scoreNoCritical = 0x100
	scoreScope      = 0x080
	scoreTime       = 0x040
	scoreIssuerName = 0x020
	scoreIssuerCert = 0x018
	scoreAKID       = 0x004
)

// checkChain checks every certificate of chain (leaf first, root last) as OpenSSL's
// check_revocation does with X509_V_FLAG_CRL_CHECK_ALL (x509_vfy.c), twice when there are delta
// CRLs (deltaCRLIndicator, RFC 5280 5.2.4), which libpq never asks for (no
// X509_V_FLAG_USE_DELTAS):
//   - as OpenSSL 3.0 does (the OpenSSL libpq links on Debian 12): a delta CRL is scored as a
//     complete one (get_crl_score refuses a delta only with X509_V_FLAG_EXTENDED_CRL_SUPPORT,
//     which libpq does not set either), so the newest CRL of the best score may be a delta;
//     check_crl then skips its key usage and scope checks, and one out of scope ends in "unable
//     to get certificate CRL";
//   - then without delta CRLs, as current OpenSSL does (get_crl_score refuses a delta whatever
//     the flags): a delta lists only what changed since its base, so a delta alone, or a newer
//     delta that does not repeat its base's revocations, is not enough.
//
// The first failure is returned: OpenSSL 3.0's verdict, else the one without deltas.
func (s *CRLStore) checkChain(chain []*x509.Certificate, now time.Time) error {
	for _, deltas := range []bool{true, false} {
		if !deltas && !s.sawDelta {
			break
		}
		for i, cert := range chain {
			if err := s.checkCert(chain, i, now, deltas); err != nil {
				return fmt.Errorf("certificate verify failed: %w (certificate at depth %d, %s)",
					err, i, cert.Subject)
			}
		}
	}
	return nil
}

// checkCert is OpenSSL's check_cert for chain[i]: get_crl_delta (without X509_V_FLAG_USE_DELTAS,
// so no delta over a base), check_crl and cert_crl, until CRLs cover all reasons (a distribution
// point of the certificate may limit a CRL to some reasons). deltas says whether a delta CRL
// counts as a complete one (OpenSSL 3.0) or not at all.
func (s *CRLStore) checkCert(chain []*x509.Certificate, i int, now time.Time, deltas bool) error {
	cert := chain[i]
	certIssuer, err := canonicalName(cert.RawIssuer)
	if err != nil {
		return err
	}
	dps, err := certDistPoints(cert)
	if err != nil {
		return err
	}
	// The issuer is the next certificate, or the last certificate itself when it is self-issued
	// (crl_akid_check, check_crl).
	var issuer *x509.Certificate
	if i+1 < len(chain) {
		issuer = chain[i+1]
	} else if subj, err := canonicalName(cert.RawSubject); err == nil && bytes.Equal(subj, certIssuer) {
		issuer = cert
	}
	var issuerSubject []byte
	if issuer != nil {
		if issuerSubject, err = canonicalName(issuer.RawSubject); err != nil {
			return err
		}
	}

	crls := s.lookup(certIssuer)
	if issuer == nil && len(crls) > 0 {
		// The chain ends at a certificate that is not self-issued: the CRLs of its issuer are
		// there, the issuer's key that signed them is not (OpenSSL's check_crl, which libpq
		// meets only with X509_V_FLAG_PARTIAL_CHAIN, never set).
		return errors.New("unable to get CRL issuer certificate")
	}
	for covered := uint16(0); covered != allReasons; {
		var best *crl
		bestScore, bestReasons := 0, covered
		for _, c := range crls {
			if c.delta && !deltas {
				continue
			}
			score, reasons := crlScore(c, cert, dps, issuer, issuerSubject, covered, now)
			if score == 0 || score < bestScore {
				continue
			}
			if score == bestScore && best != nil && !c.rl.ThisUpdate.After(best.rl.ThisUpdate) {
				continue
			}
			best, bestScore, bestReasons = c, score, reasons
		}
		if best == nil {
			return errors.New("unable to get certificate CRL")
		}

		// check_crl; OpenSSL skips the first two checks for a delta CRL.
		if !best.delta {
			if issuer.KeyUsage != 0 && issuer.KeyUsage&x509.KeyUsageCRLSign == 0 {
				return errors.New("key usage does not include CRL signing")
			}
			if bestScore&scoreScope == 0 {
				return errors.New("different CRL scope")
			}
		}
		if bestScore&scoreTime == 0 {
			if best.rl.ThisUpdate.After(now) {
				return errors.New("CRL is not yet valid")
			}
			return errors.New("CRL has expired")
		}
		if err := checkSignature(issuer, best.rl.SignatureAlgorithm, best.rl.RawTBSRevocationList, best.rl.Signature); err != nil {
			return errors.New("CRL signature failure")
		}

		// cert_crl
		if best.critical {
			return errors.New("unhandled critical CRL extension")
		}
		for _, e := range best.rl.RevokedCertificateEntries {
			if e.SerialNumber != nil && e.SerialNumber.Cmp(cert.SerialNumber) == 0 && e.ReasonCode != reasonRemoveFromCRL {
				return errors.New("certificate revoked")
			}
		}

		// check_cert: a CRL that adds no reason (out of scope) ends the search.
		if bestReasons == covered {
			return errors.New("unable to get certificate CRL")
		}
		covered = bestReasons
	}
	return nil
}

// crlScore is OpenSSL's get_crl_score for CRL c (issued by the certificate's issuer name) and
// certificate cert with distribution points dps, whose issuer in the chain is issuer (nil when
// it has none there), when CRLs already cover the reasons covered. reasons is covered with
// those c adds when it is in scope.
func crlScore(c *crl, cert *x509.Certificate, dps []distPoint, issuer *x509.Certificate, issuerSubject []byte,
	covered uint16, now time.Time) (score int, reasons uint16) {
	if c.unusable {
		return 0, covered
	}
	score = scoreIssuerName
	if !c.critical {
		score |= scoreNoCritical
	}
	if !c.rl.ThisUpdate.After(now) && (c.rl.NextUpdate.IsZero() || !now.After(c.rl.NextUpdate)) {
		score |= scoreTime
	}
	// crl_akid_check: the issuer in the chain has the CRL's issuer name and matches the CRL's
	// authority key identifier (X509_check_akid).
	if issuer == nil || !bytes.Equal(issuerSubject, c.issuer) || !c.akid.matches(issuer) {
		return 0, covered
	}
	score |= scoreAKID | scoreIssuerCert
	if r, ok := inScope(c, cert, dps); ok {
		if r&^covered == 0 {
			return 0, covered // no new reasons
		}
		score |= scoreScope
		covered |= r
	}
	return score, covered
}

// inScope is OpenSSL's crl_crldp_check for a CRL issued by the certificate's issuer name: the
// first distribution point of the certificate whose cRLIssuer (if any) names the CRL's issuer
// and whose name matches the IDP's (idp_check_dp) puts the CRL in scope for its reasons;
// without one, a CRL whose IDP names no distribution point is in scope for all reasons.
func inScope(c *crl, cert *x509.Certificate, dps []distPoint) (reasons uint16, ok bool) {
	if idp := c.idp; idp != nil {
		if idp.onlyAttr || cert.IsCA && idp.onlyUser || !cert.IsCA && idp.onlyCA {
			return 0, false
		}
	}
	for _, dp := range dps {
		if dp.crlIssuer != nil && !slices.ContainsFunc(dp.crlIssuer, func(g generalName) bool {
			return g.dir && g.canon != nil && bytes.Equal(g.canon, c.issuer)
		}) {
			continue
		}
		if c.idp == nil || dpNamesMatch(dp.name, c.idp.dp) {
			return allReasons & dp.reasons, true
		}
	}
	return allReasons, c.idp == nil || c.idp.dp == nil
}

// dpNamesMatch is OpenSSL's idp_check_dp: a missing name matches any; two full names match
// when they share a general name; a relative name (completed) matches the other relative
// name, or a directoryName of the other full name.
func dpNamesMatch(a, b *dpName) bool {
	if a == nil || b == nil {
		return true
	}
	switch {
	case a.relative != nil && b.relative != nil:
		return bytes.Equal(a.relative, b.relative)
	case a.relative != nil:
		return slices.ContainsFunc(b.full, func(g generalName) bool { return g.equal(generalName{dir: true, canon: a.relative}) })
	case b.relative != nil:
		return slices.ContainsFunc(a.full, func(g generalName) bool { return g.equal(generalName{dir: true, canon: b.relative}) })
	}
	for _, g := range a.full {
		if slices.ContainsFunc(b.full, g.equal) {
			return true
		}
	}
	return false
}

// canonicalName is OpenSSL's canonical form of a DER Name (x509_name_canon), which X509_NAME_cmp
// compares and X509_NAME_hash_ex hashes: each RDN re-encoded as a SET of its attributes, string
// values converted to UTF8String, trimmed, inner white space collapsed to one space and ASCII
// lower-cased; the RDNs concatenated without the outer SEQUENCE.
func canonicalName(der []byte) ([]byte, error) {
	var seq asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &seq); err != nil || len(rest) > 0 || seq.Tag != asn1.TagSequence {
		return nil, errors.New("malformed name")
	}
	var out []byte
	for rdns := seq.Bytes; len(rdns) > 0; {
		var set asn1.RawValue
		var err error
		if rdns, err = asn1.Unmarshal(rdns, &set); err != nil || set.Tag != asn1.TagSet {
			return nil, errors.New("malformed name")
		}
		var attrs [][]byte
		for b := set.Bytes; len(b) > 0; {
			var atv struct {
				Type  asn1.ObjectIdentifier
				Value asn1.RawValue
			}
			if b, err = asn1.Unmarshal(b, &atv); err != nil {
				return nil, errors.New("malformed name")
			}
			v := atv.Value
			if s, ok := canonString(v); ok {
				v = asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagUTF8String, Bytes: s}
			} else {
				v = asn1.RawValue{FullBytes: v.FullBytes}
			}
			enc, err := asn1.Marshal(struct {
				Type  asn1.ObjectIdentifier
				Value asn1.RawValue
			}{atv.Type, v})
			if err != nil {
				return nil, err
			}
			attrs = append(attrs, enc)
		}
		slices.SortFunc(attrs, bytes.Compare) // DER SET OF order
		enc, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true,
			Bytes: bytes.Join(attrs, nil)})
		if err != nil {
			return nil, err
		}
		out = append(out, enc...)
	}
	return out, nil
}

// canonString is OpenSSL's asn1_string_canon for the string types it canonicalises; ok is false
// for the other types (kept as they are). UniversalString, which OpenSSL canonicalises too, is
// left out: crypto/x509 does not parse a name that has one.
func canonString(v asn1.RawValue) (s []byte, ok bool) {
	if v.Class != asn1.ClassUniversal {
		return nil, false
	}
	var u []byte
	switch v.Tag {
	case asn1.TagUTF8String, asn1.TagPrintableString, asn1.TagIA5String, 26 /* VisibleString */ :
		u = v.Bytes
	case asn1.TagT61String: // read as Latin-1, as OpenSSL does
		for _, c := range v.Bytes {
			u = utf8.AppendRune(u, rune(c))
		}
	case asn1.TagBMPString:
		units := make([]uint16, len(v.Bytes)/2)
		for i := range units {
			units[i] = binary.BigEndian.Uint16(v.Bytes[2*i:])
		}
		for _, r := range utf16.Decode(units) {
			u = utf8.AppendRune(u, r)
		}
	default:
		return nil, false
	}
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' }
	for len(u) > 0 && isSpace(u[0]) {
		u = u[1:]
	}
	for len(u) > 0 && isSpace(u[len(u)-1]) {
		u = u[:len(u)-1]
	}
	out := make([]byte, 0, len(u))
	for i := 0; i < len(u); {
		c := u[i]
		switch {
		case c >= 0x80:
			out = append(out, c)
			i++
		case isSpace(c):
			out = append(out, ' ')
			for i < len(u) && isSpace(u[i]) {
				i++
			}
		default:
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			out = append(out, c)
			i++
		}
	}
	return out, true
}

// nameHash is OpenSSL's X509_NAME_hash_ex of a canonical name, as "openssl rehash" and
// "openssl x509 -hash" print it: the first four bytes of its SHA-1, little-endian, in hex.
func nameHash(canon []byte) string {
	sum := sha1.Sum(canon)
	return fmt.Sprintf("%08x", binary.LittleEndian.Uint32(sum[:4]))
}
