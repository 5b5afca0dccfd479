package mysqllock

import (
	"database/sql"
	"testing"

	"github.com/dlock/dlock/internal/testenv"
	_ "github.com/go-sql-driver/mysql"
)

func TestScratch(t *testing.T) {
	m := testenv.StartMariaDB(t)
	db, err := sql.Open("mysql", m.DSN(testenv.MariaDBUser, testenv.MariaDBPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	must := func(q string, a ...any) sql.Result {
		r, err := db.Exec(q, a...)
		if err != nil {
			t.Fatal(q, err)
		}
		return r
	}
	must("CREATE TABLE t (name VARBINARY(1024) PRIMARY KEY, token BIGINT UNSIGNED NOT NULL, owner VARBINARY(64) NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB")
	q := `INSERT INTO t (name, token, owner, expires_at) VALUES (?, LAST_INSERT_ID(5) >> 2, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
 token = IF(expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID((token + 1) << 2 | (owner IS NOT NULL) << 1 | 1) >> 2, token + (LAST_INSERT_ID(GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0) << 1) & 0)),
 owner = IF(expires_at <= UTC_TIMESTAMP(6), ?, owner),
 expires_at = IF(expires_at <= UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, expires_at)`
	st, err := db.Prepare(q)
	if err != nil {
		t.Fatal(err)
	}
	for i, ttl := range []int{2000000, 2000000, 1, 1, 3000000} {
		r, err := st.Exec("a", "o"+string(rune('0'+i)), ttl, "o"+string(rune('0'+i)), ttl)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := r.LastInsertId()
		n, _ := r.RowsAffected()
		t.Logf("ttl=%d id=%d (odd=%v tok=%d rec=%d / remain=%d) rows=%d", ttl, id, id&1, id>>2, id>>1&1, id>>1, n)
		if i == 1 {
			must("UPDATE t SET expires_at='1000-01-01' WHERE name='a'")
		}
	}
	var v sql.NullInt64
	row := db.QueryRow("SELECT GET_LOCK('x', 0.5)")
	row.Scan(&v)
	t.Log("getlock", v)
	conn, _ := db.Conn(t.Context())
	var id int64
	conn.QueryRowContext(t.Context(), "SELECT CONNECTION_ID()").Scan(&id)
	var u sql.NullInt64
	conn.QueryRowContext(t.Context(), "SELECT IS_USED_LOCK('x')").Scan(&u)
	t.Log("used by", u, "i am", id)
}
