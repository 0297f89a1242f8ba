package monitor_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/internal/rnictest"
	"github.com/rnicd/rnicd/monitor"
)

// /api/inject asks Authorize with the peer's credentials: over a unix
// socket they are the client's (SO_PEERCRED), over TCP there are none;
// a refusal is a 403 with the reason, and the injector is untouched.
func TestInjectAuthorize(t *testing.T) {
	a, _ := rnictest.NewEnds(t, nil)
	var asked []string
	auth := func(r *http.Request, what string) error {
		cred, ok := monitor.PeerCred(r.Context())
		asked = append(asked, fmt.Sprintf("%s %v", what, ok))
		if !ok {
			return errors.New("no credentials")
		}
		if int(cred.Uid) != os.Geteuid() || int(cred.Pid) != os.Getpid() {
			return fmt.Errorf("credentials %+v are not this process's", cred)
		}
		return nil
	}
	m, err := monitor.New(monitor.Config{Devices: []monitor.Device{{Dev: a.Dev, Faulty: a.Faulty}}, Authorize: auth})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tcp := httptest.NewServer(m.Handler())
	defer tcp.Close()
	if code, body := post(t, tcp.URL, monitor.InjectRequest{Device: "rnic0", Spec: "drop 100%"}); code != http.StatusForbidden || !strings.Contains(body, "no credentials") {
		t.Fatalf("inject over TCP: %d %q, want 403 no credentials", code, body)
	}
	if a.Faulty.TX().Drop != 0 {
		t.Fatal("a refused inject changed the injector")
	}
	path := filepath.Join(t.TempDir(), "mon")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	us := &http.Server{Handler: m.Handler(), ConnContext: monitor.ConnContext}
	go us.Serve(l)
	defer us.Close()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	resp, err := hc.Post("http://rnicd/api/inject", "application/json", strings.NewReader(`{"device":"rnic0","spec":"drop 100%"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || a.Faulty.TX().Drop != 1 {
		t.Fatalf("inject over the unix socket: %v, TX drop %v", resp.Status, a.Faulty.TX().Drop)
	}
	if want := "inject false,inject true"; strings.Join(asked, ",") != want {
		t.Fatalf("asked %q, want %q", asked, want)
	}
}
