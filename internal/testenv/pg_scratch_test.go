package testenv

import ("testing")

func TestScratchPG(t *testing.T) {
	p := StartPostgres(t)
	t.Log(p.Exec(`select pg_notify('a','b')::text is null, pg_notify('a','b') is null; create sequence s; create table l(name bytea primary key, token bigint, e timestamptz);`))
	t.Log(p.Exec(`with ins as (insert into l as x values ('a', nextval('s'), clock_timestamp() + 1000000 * interval '1 microsecond') on conflict (name) do update set token=excluded.token where x.e <= clock_timestamp() returning x.token, x.xmax <> 0 as rec)
	select token, rec, 0::bigint, pg_notify('c', 'd')::text from ins union all select null, null, (extract(epoch from e - clock_timestamp())*1e6)::bigint, null from l where name = 'a' and not exists (select 1 from ins)`))
	t.Log(p.Exec(`with ins as (insert into l as x values ('a', nextval('s'), clock_timestamp() + 1000000 * interval '1 microsecond') on conflict (name) do update set token=excluded.token where x.e <= clock_timestamp() returning x.token, x.xmax <> 0 as rec)
	select token, rec, 0::bigint, pg_notify('c', 'd')::text from ins union all select null, null, (extract(epoch from e - clock_timestamp())*1e6)::bigint, null from l where name = 'a' and not exists (select 1 from ins)`))
}
