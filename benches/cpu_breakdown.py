"""Where a server's CPU goes: the share of `perf` samples by category.

    perf record -F 999 --call-graph dwarf,16384 -o OUT -p PID -- sleep 5
    perf script -i OUT | python3 benches/cpu_breakdown.py

Each sample is put in the first category that matches it, in this order:
the checkpointer thread; an allocator function at the leaf; a frame of
SQLite; of LZ4; of JSON reading; of the window engine; the kernel at the
leaf (network and epoll, or the rest: scheduling, futexes, I/O); the HTTP
stack and tokio; other. Stacks that DWARF unwinding cuts short fall into
the categories their leaf names. BENCHMARKS.md quotes its tables.
"""
import sys, re, collections
cats=collections.Counter(); total=0; stack=[]; dsos=[]; comm=''
def flush():
    global total
    if not stack: return
    total+=1
    leaf=stack[0]; ldso=dsos[0]
    anyf=lambda r: any(re.search(r,s) for s in stack)
    if comm.startswith('checkpointer'): c='automatic checkpoints (checkpointer thread)'
    elif re.search(r'malloc|free|_rjem|sdallocx|realloc|calloc|unlink_chunk|consolidate',leaf) and 'kernel' not in ldso: c='allocator'
    elif anyf(r'sqlite3|rusqlite'): c='SQLite (command log, commit, fsync)'
    elif anyf(r'lz4_flex'): c='LZ4 (command bodies)'
    elif anyf(r'parse::|fastparse|serde_json'): c='JSON reading'
    elif anyf(r'streamforge_engine'): c='window engine'
    elif 'kernel' in ldso and anyf(r'tcp_|sock_|inet_|__sys_sendto|recvfrom|writev|readv|epoll'): c='kernel: network and epoll'
    elif 'kernel' in ldso: c='kernel: scheduling, futex, other'
    elif anyf(r'hyper|axum|tower|http::|tokio'): c='HTTP stack and tokio'
    else: c='other'
    cats[c]+=1
for line in sys.stdin:
    line=line.rstrip('\n')
    if not line.strip():
        flush(); stack.clear(); dsos.clear(); continue
    if line[0] in ' \t':
        parts=line.strip().split(' ',1)
        if len(parts)==2:
            m=re.search(r'\(([^)]*)\)\s*$',parts[1]); dsos.append(m.group(1) if m else '')
            sym=re.sub(r'\+0x[0-9a-f]+ .*$','',parts[1]); sym=re.sub(r' \([^)]*\)$','',sym)
            stack.append(sym)
    else:
        comm=line.split()[0] if line.split() else ''
flush()
for c,n in sorted(cats.items(), key=lambda x:-x[1]): print(f"{100*n/total:5.1f}%  {c}")
print("samples", total)
