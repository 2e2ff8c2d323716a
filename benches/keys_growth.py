import http.client, json, os, sqlite3, subprocess, time, sys, re
# Growth of the idempotency keys: N keyed pushes of 10 events (and a keyed
# advance every 20) into a release server keeping 1,000 keys; prints the
# keys kept, the server's RSS and the database's size along the way, then the
# restart time. Run from an empty directory:
#   cargo build --release && mkdir -p /tmp/g && cd /tmp/g && python3 $REPO/benches/keys_growth.py 20000
import pathlib
bin=str(pathlib.Path(__file__).resolve().parent.parent/"target/release/streamforge")
doc='{"patterns":[{"name":"p","within":100,"stages":[{"name":"a","where":{"kind":"a"}},{"name":"b","where":{"kind":"b"}}]}]}'
open("doc.json","w").write(doc)
p=subprocess.Popen([bin,"serve","--addr","127.0.0.1:18777","--db","db","--patterns","doc.json","--idempotency-keys","1000"],stderr=open("log","w"))
for _ in range(100):
    try:
        c=http.client.HTTPConnection("127.0.0.1",18777); c.request("GET","/readyz"); r=c.getresponse(); r.read()
        if r.status==200: break
    except Exception: pass
    time.sleep(0.1)
c=http.client.HTTPConnection("127.0.0.1",18777)
t=0; N=int(sys.argv[1])
def rss(): return int(re.search(r"VmRSS:\s+(\d+)",open(f"/proc/{p.pid}/status").read()).group(1))
for i in range(N):
    evs="\n".join(json.dumps({"id":f"e{i}-{j}","key":f"k{j%50}","kind":"ab"[j%2],"time":t+j,"fields":{}}) for j in range(10))
    t+=10
    c.request("POST","/patterns/events",evs,{"content-type":"application/x-ndjson","idempotency-key":f"k{i}"}); r=c.getresponse(); r.read(); assert r.status==200
    if i%20==19:
        c.request("POST","/patterns/advance",json.dumps({"watermark":t-1}),{"idempotency-key":f"a{i}"}); r=c.getresponse(); r.read(); assert r.status==200
    if (i+1)%(N//5)==0:
        db=sqlite3.connect("db"); n=db.execute("select count(*) from idempotency_keys").fetchone()[0]; db.close()
        print(f"{i+1} keyed pushes: {n} keys kept, RSS {rss()/1024:.1f} MB, db+wal {sum(os.path.getsize(f) for f in os.listdir('.') if f.startswith('db'))/1e6:.1f} MB", flush=True)
p.kill(); p.wait()
t0=time.time()
p=subprocess.Popen([bin,"serve","--addr","127.0.0.1:18777","--db","db","--patterns","doc.json","--idempotency-keys","1000"],stderr=open("log2","w"))
while True:
    try:
        c=http.client.HTTPConnection("127.0.0.1",18777); c.request("GET","/readyz"); r=c.getresponse(); r.read()
        if r.status==200: break
    except Exception: pass
    time.sleep(0.02)
print(f"restart to ready: {time.time()-t0:.2f} s")
p.kill()
