package negotiate

import (
	"context"
	"database/sql/driver"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The cases of PostgreSQL's src/interfaces/libpq/t/003_load_balance_host_list.pl and
// 004_load_balance_dns.pl, as data: three nodes, a string naming them (a host list in 003,
// one name with three addresses in 004), and the connections the scripts make with
// load_balance_hosts, first with every node up, then with the first two stopped. They run on
// PostgreSQL 18 beside psql on libpq 18 (load_balance_hosts is libpq 16's). Each node has a
// cluster_name ("node1"...), which the query prints, so that the nodes a client reached are
// counted per client; the server logs (log_statement = all) must count the same.

// An lbStep is one connection, or one loop of connections, of the scripts.
type lbStep struct {
	name  string // the script's test name
	keys  string // load_balance_hosts=...
	tag   string // the query's literal, as the script's: connect1 ... connect4
	times int    // connections made (the script's loops)
	fails bool   // the string is refused, with libpq's message failsMessage
	nodes []int  // the nodes (0-based) the connections may reach
	every bool   // each of nodes gets more than one (the script's statistical check)
}

// failsMessage is the script's expected_stderr for load_balance_hosts=doesnotexist.
var failsMessage = regexp.MustCompile(`invalid load_balance_hosts value: "doesnotexist"`)

// lbAllUp are the steps with every node up, lbTwoDown those after node1 and node2 stopped.
var (
	lbAllUp = []lbStep{
		{name: "load_balance_hosts doesn't accept unknown values", keys: "load_balance_hosts=doesnotexist", tag: "connect0", times: 1, fails: true},
		{name: "load_balance_hosts=disable connects to the first node", keys: "load_balance_hosts=disable", tag: "connect1", times: 1, nodes: []int{0}},
		// The chance that a node gets fewer than two of 50 random connections is about 4e-8.
		{name: "repeated connections with random load balancing", keys: "load_balance_hosts=random", tag: "connect2", times: 50, nodes: []int{0, 1, 2}, every: true},
	}
	lbTwoDown = []lbStep{
		{name: "load_balance_hosts=disable continues until it connects to the a working node", keys: "load_balance_hosts=disable", tag: "connect3", times: 1, nodes: []int{2}},
		{name: "load_balance_hosts=random continues until it connects to the a working node", keys: "load_balance_hosts=random", tag: "connect4", times: 5, nodes: []int{2}},
	}
)

// lbNodeSettings are a node's settings: its name, and every statement in its log.
func lbNodeSettings(i int) map[string]string {
	return map[string]string{"cluster_name": fmt.Sprintf("node%d", i+1), "log_statement": "all"}
}

// A psqlFunc runs psql with a connection string and a query.
type psqlFunc func(ctx context.Context, conninfo, query string) (string, error)

// runLBStep runs a step with psql, then with one Connector, and checks each: the refusal, or
// where the connections went. It returns the connections per node (psql's and the
// connector's together).
func runLBStep(t *testing.T, base string, psql psqlFunc, s lbStep) [3]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conninfo := base + " " + s.keys
	query := fmt.Sprintf("SELECT '%s', current_setting('cluster_name')", s.tag)
	var total [3]int
	check := func(who string, reached []string, errs []string) {
		t.Helper()
		if s.fails {
			if len(errs) != s.times {
				t.Errorf("%s: %d of %d connections refused, the script expects all", who, len(errs), s.times)
			}
			for _, e := range errs {
				if !strings.Contains(e, "load_balance_hosts") || !strings.Contains(e, `"doesnotexist"`) {
					t.Errorf("%s: the refusal does not name load_balance_hosts and its value: %s", who, e)
				}
			}
			return
		}
		if len(errs) > 0 {
			t.Errorf("%s: %d of %d connections failed, the first: %s", who, len(errs), s.times, errs[0])
		}
		var counts [3]int
		for _, r := range reached {
			var n int
			if _, err := fmt.Sscanf(r, s.tag+"|node%d", &n); err != nil || n < 1 || n > 3 {
				t.Errorf("%s: printed %q", who, r)
				continue
			}
			counts[n-1]++
			total[n-1]++
		}
		allowed := map[int]bool{}
		for _, n := range s.nodes {
			allowed[n] = true
			if s.every && counts[n] < 2 {
				t.Errorf("%s: node%d got %d of %d connections, the script expects more than one", who, n+1, counts[n], s.times)
			}
		}
		for n, c := range counts {
			if c > 0 && !allowed[n] {
				t.Errorf("%s: node%d got %d connections, the script expects only nodes %v (0-based)", who, n+1, c, s.nodes)
			}
		}
		t.Logf("%s: %d connections, per node %v", who, len(reached), counts)
	}

	var reached, errs []string
	for range s.times {
		out, err := psql(ctx, conninfo, query)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		reached = append(reached, out)
	}
	if s.fails {
		for _, e := range errs {
			if !failsMessage.MatchString(e) {
				t.Errorf("psql: %s, the script expects %s", e, failsMessage)
			}
		}
	}
	check("psql", reached, errs)

	reached, errs = nil, nil
	c, err := pgconnector.New(conninfo)
	if err != nil {
		errs = append(errs, err.Error())
	} else {
		defer c.Close()
		for range s.times {
			out, err := connectorQuery(ctx, c, query)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			reached = append(reached, out)
		}
	}
	check("connector", reached, errs)
	return total
}

// connectorQuery connects with c, runs query and prints its one row as psql -A -t does.
func connectorQuery(ctx context.Context, c *pgconnector.Connector, query string) (string, error) {
	dc, err := c.Connect(ctx)
	if err != nil {
		return "", err
	}
	defer dc.Close()
	rows, err := dc.(driver.QueryerContext).QueryContext(ctx, query, nil)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(dest); err != nil {
		return "", err
	}
	cols := make([]string, len(dest))
	for i, v := range dest {
		cols[i] = fmt.Sprint(v)
	}
	return strings.Join(cols, "|"), nil
}

// statementsLogged counts the statements with the query of tag in a node's log: psql's simple
// query ("statement: ...") and the connector's extended one ("execute <name>: ...").
func statementsLogged(log, tag string) int {
	re := regexp.MustCompile(`(?m)(?:statement|execute [^:]*): SELECT '` + tag + `'`)
	return len(re.FindAllString(log, -1))
}

// checkLBLogs checks that each node's log holds as many statements of each step as the clients
// saw reach it (the scripts' log_like and occurrence counts), for the nodes in nodes.
func checkLBLogs(t *testing.T, pgs []*harness.Postgres, steps []lbStep, seen [][3]int, nodes ...int) {
	t.Helper()
	for i, s := range steps {
		for _, n := range nodes {
			if got := statementsLogged(pgs[n].Log(), s.tag); got != seen[i][n] {
				t.Errorf("%s: node%d logged %d statements with %q, the clients reached it %d times", s.name, n+1, got, s.tag, seen[i][n])
			}
		}
	}
}

// TestLoadBalance003 runs 003_load_balance_host_list.pl: three nodes named by a host list (their
// Unix-socket directories and ports, as the script on Linux).
func TestLoadBalance003(t *testing.T) {
	t.Parallel()
	env := libpq18(t)
	pgs := make([]*harness.Postgres, 3)
	for i := range pgs {
		pgs[i] = harness.StartT(t, harness.Options{Major: 18, Settings: lbNodeSettings(i)})
	}
	base := fmt.Sprintf("host=%s,%s,%s port=%d,%d,%d user=%s dbname=%s",
		pgs[0].SocketDir, pgs[1].SocketDir, pgs[2].SocketDir, pgs[0].Port, pgs[1].Port, pgs[2].Port, harness.AppUser, harness.AppDatabase)
	psql := func(ctx context.Context, conninfo, query string) (string, error) {
		return harness.Psql(ctx, env, conninfo, query)
	}
	var seen [][3]int
	for _, s := range lbAllUp {
		t.Run(s.name, func(t *testing.T) { seen = append(seen, runLBStep(t, base, psql, s)) })
	}
	checkLBLogs(t, pgs, lbAllUp, seen, 0, 1, 2)
	for _, p := range pgs[:2] {
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	seen = nil
	for _, s := range lbTwoDown {
		t.Run(s.name, func(t *testing.T) { seen = append(seen, runLBStep(t, base, psql, s)) })
	}
	checkLBLogs(t, pgs, lbTwoDown, seen, 2)
}
