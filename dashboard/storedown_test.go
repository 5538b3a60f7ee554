package dashboard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// When the store stops answering, the page stops calling its frozen counts live: the indicator and a
// banner say "store unreachable" with a classified reason (never the driver's text, which names
// hosts and databases), and both clear on the next good update.
func TestStoreDownShownAndCleared(t *testing.T) {
	st := &flakyStore{Store: memory.New()}
	base, c := st.serve(t, nil)
	if _, err := c.Insert(context.Background(), noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "down"}); err != nil {
		t.Fatal(err)
	}
	u := newOpUI(t)
	u.step("overview live", chromedp.Navigate(base+"/#/"),
		u.wait(`document.querySelector('td[data-q="down"][data-s="available"]') !== null && document.querySelector("#live.on") !== null`))
	st.down.Store(true)
	u.step("the store is down", u.wait(`document.querySelector("#live.on") === null && !document.getElementById("banner").hidden`))
	ind, banner := u.str(`document.getElementById("live").textContent`), u.str(`document.getElementById("banner").textContent`)
	if ind != "store unreachable" || !strings.HasPrefix(banner, "store unreachable: cannot connect to the store") {
		t.Fatalf("with the store refusing connections the indicator says %q and the banner %q; want \"store unreachable\" and \"store unreachable: cannot connect to the store…\"", ind, banner)
	}
	if strings.Contains(banner, "127.0.0.1") || strings.Contains(banner, "5432") {
		t.Fatalf("the banner %q shows the store's address", banner)
	}
	// A page opened while the store is down learns it from the stream at once, and a view whose
	// read fails says why without the address either.
	u.step("a new page while down", chromedp.Reload(),
		u.wait(`document.getElementById("live").textContent === "store unreachable" && !document.getElementById("banner").hidden`),
		u.wait(`document.querySelector("main .error") !== null`))
	if msg := u.str(`document.querySelector("main .error").textContent`); msg != "store unreachable: cannot connect to the store" {
		t.Fatalf("the overview opened while the store is down says %q; want \"store unreachable: cannot connect to the store\"", msg)
	}
	st.down.Store(false)
	u.step("the store is back", u.wait(`document.querySelector("#live.on") !== null && document.getElementById("live").textContent === "live" && document.getElementById("banner").hidden`))
}
