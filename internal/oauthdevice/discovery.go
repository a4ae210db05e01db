package oauthdevice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/pgconnector/pgconnector/internal/jsonfields"
)

// maxDocument is the largest discovery document read (libpq-oauth's MAX_OAUTH_RESPONSE_SIZE).
const maxDocument = 256 << 10

// maxNesting is the deepest nesting of a discovery document's JSON (libpq-oauth's
// MAX_OAUTH_NESTING_LEVEL).
const maxNesting = 16

// provider is what the flow reads of the discovery document (OpenID Connect Discovery 1.0
// section 3, RFC 8414 section 2), as libpq-oauth's parse_provider.
type provider struct {
	Issuer                      string
	TokenEndpoint               string
	DeviceAuthorizationEndpoint string
}

// discover fetches r.DiscoveryURI and checks it as libpq-oauth does (finish_discovery,
// check_issuer, check_for_device_flow): status 200, Content-Type application/json, valid UTF-8,
// "issuer" and "token_endpoint" present and strings, the issuer equal to r.Issuer, a device
// authorization endpoint, both endpoints https. grant_types_supported is not read: libpq 18
// stopped requiring the device_code grant there, since Microsoft Entra ID does not list it.
func discover(ctx context.Context, client *http.Client, r Request) (*provider, error) {
	const errctx = "failed to parse OpenID discovery document"
	if !isHTTPS(r.DiscoveryURI) {
		return nil, fmt.Errorf("discovery URI %q must use HTTPS", clip(r.DiscoveryURI))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.DiscoveryURI, nil)
	if err != nil {
		return nil, fmt.Errorf("discovery URI %q: %w", clip(r.DiscoveryURI), err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to fetch OpenID discovery document: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("failed to fetch OpenID discovery document: unexpected response code %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocument+1))
	if err != nil {
		return nil, fmt.Errorf("failed to fetch OpenID discovery document: %w", err)
	}
	if len(body) > maxDocument {
		return nil, fmt.Errorf("%s: response is larger than %d bytes", errctx, maxDocument)
	}
	if err := checkContentType(resp.Header.Get("Content-Type")); err != nil {
		return nil, fmt.Errorf("%s: %w", errctx, err)
	}
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%s: response is not valid UTF-8", errctx)
	}
	p, err := parseProvider(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", errctx, err)
	}
	if p.Issuer != r.Issuer {
		return nil, fmt.Errorf("the issuer identifier (%s) does not match oauth_issuer (%s)", clip(p.Issuer), r.Issuer)
	}
	if p.DeviceAuthorizationEndpoint == "" {
		return nil, fmt.Errorf("issuer %q does not provide a device authorization endpoint", clip(p.Issuer))
	}
	if !isHTTPS(p.DeviceAuthorizationEndpoint) {
		return nil, fmt.Errorf("device authorization endpoint %q must use HTTPS", clip(p.DeviceAuthorizationEndpoint))
	}
	if !isHTTPS(p.TokenEndpoint) {
		return nil, fmt.Errorf("token endpoint %q must use HTTPS", clip(p.TokenEndpoint))
	}
	return p, nil
}

// isHTTPS reports whether u starts with https:// (case-insensitive, as libpq's check).
func isHTTPS(u string) bool {
	return len(u) >= len("https://") && strings.EqualFold(u[:len("https://")], "https://")
}

// checkContentType accepts application/json with parameters, as libpq's check_content_type.
func checkContentType(ct string) error {
	if ct == "" {
		return errors.New("no content type was provided")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Errorf("unexpected content type: %q", clip(ct))
	}
	return nil
}

// parseProvider reads the document's top-level fields with libpq-oauth's rules (internal/jsonfields):
// one object, nested at most maxNesting levels, each field at most once and a string.
func parseProvider(body []byte) (*provider, error) {
	p := &provider{}
	fields := []jsonfields.Field{{Name: "issuer", To: &p.Issuer}, {Name: "token_endpoint", To: &p.TokenEndpoint},
		{Name: "device_authorization_endpoint", To: &p.DeviceAuthorizationEndpoint}}
	if err := jsonfields.Read(body, maxNesting, fields); err != nil {
		return nil, err
	}
	for _, f := range fields[:2] { // required
		if !f.Seen {
			return nil, fmt.Errorf("field %q is missing", f.Name)
		}
	}
	return p, nil
}
