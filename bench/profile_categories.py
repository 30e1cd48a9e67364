#!/usr/bin/python3
"""Splits a whole-machine perf profile of the site-to-site benchmark into categories of work.

Usage: perf script -i perf.data | bench/profile_categories.py -      (or a file of it)

Input: `perf script` output of `perf record -a -g` (the default fields: a header line per
sample with the command name first, then one frame per line, leaf first: address, symbol,
object in parentheses). Each sample goes to ONE category, the first that its call chain
names from the leaf up. Frames that say nothing by themselves are skipped on the way up:
the kernel's entry and exit code, libc's system call wrappers, and the irq-enable points
(`pvm_irq_enable`, `_raw_spin_unlock_irqrestore`): in this project's VMs (PVM guests)
samples taken while interrupts were off are reported where they are turned back on, so
their callers say what the time went to. A chain of only such frames is kernel entry and
exit. Prints the share of each category per process group (espgw's threads, iperf3,
other) and of the whole machine.

A second table splits espgw's samples by whose work they are. espgw owns no TCP socket,
so a sample whose chain holds a TCP frame is the LAN hosts' TCP (the iperf3 receiver's
segments, the sender's ACK processing and its next transmissions) that the kernel ran in
softirq on espgw's thread, because a TUN write or a veth transmit raised it there. The
kernel's tick accounting (no IRQ_TIME_ACCOUNTING) charges that time to espgw's process CPU
and so to its cycles per ESP packet.
"""
import sys, re, collections
# (category, predicate on (symbol, object)), tried on each frame from the leaf up.
RULES = [
 ('crypto', lambda s,d: 'IPSec_MB' in d or s.startswith('aes_gcm') or 'chacha' in s),
 ('checksums', lambda s,d: 'checksum' in s or 'sum_words' in s or s.startswith('csum_') or s=='do_csum'),
 ('copies', lambda s,d: s in ('_copy_to_iter','_copy_from_iter','copy_user_generic','rep_movs_alternative') or s.startswith('__memmove') or s.startswith('__memcpy') or s.startswith('__memset')),
 ('segmenting/coalescing', lambda s,d: 'TsoSegmenter' in s or 'TcpCoalescer' in s or 'gro' in s or 'gso' in s or s=='skb_segment'),
 ('skb work', lambda s,d: 'skb' in s and ('alloc' in s or 'free' in s or 'release' in s or 'consume' in s or 'frag_refill' in s) or s.startswith('kmem_cache') or 'alloc_pages' in s or s.startswith('__free_pages') or 'page_frag' in s or s.startswith('get_page_from_freelist') or s.startswith('__rmqueue') or s.startswith('free_unref')),
]
SCHED = re.compile(r'^(__schedule|schedule|finish_task_switch|try_to_wake_up|ttwu_|sock_def_readable|__wake_up|do_sys_poll|do_select|futex_|poll_schedule|schedule_hrtimeout|enqueue_task|dequeue_task|pick_next|update_curr|select_task_rq)')
IRQEN = ('pvm_irq_enable','__raw_callee_save_pvm_irq_enable','_raw_spin_unlock_irqrestore')
NET = re.compile(r'^(ip_|ip6_|udp|tcp_|__tcp|fib|nft_|nf_|veth|netif|__netif|__dev_queue|dev_|tun_|sock_|__sock|inet_|__inet|skb_|__skb|napi|process_backlog|net_rx|__ip|raw_|sk_|__udp|neigh|eth_|sch_|__napi|___sys_sendmsg|____sys_sendmsg|__sys_sendmmsg|do_recvmmsg|___sys_recvmsg|____sys_recvmsg|sendmsg|recvmsg|iptunnel|rt_|dst_)')
ENTRY = re.compile(r'^(entry_SYSCALL|do_syscall_64|syscall_exit|exit_to_user|irqentry|asm_sysvec|sysvec_|__irq_exit|handle_softirqs|do_softirq|__local_bh|irq_exit|pvm_|__raw_callee_save)')
def classify(frames, comm):
    if comm == 'swapper' or any(s in ('pv_native_safe_halt','default_idle','cpuidle_idle_call','do_idle') for s,_ in frames[:3]):
        return 'idle'
    syms = [s for s,_ in frames]
    for s,d in frames:
        for cat, pred in RULES:
            if pred(s,d): return cat
        if SCHED.match(s): return 'wake-ups and scheduling'
        if s in IRQEN: continue   # samples deferred to irq enable: their callers say what it was
        if NET.match(s): return 'network stack'
        if d.endswith('espgw)') or '/espgw' in d: return 'espgw bookkeeping'
        if ENTRY.match(s): continue
        if 'libc' in d: continue
    # nothing specific: the kernel entry/exit and irq-enable themselves
    if any(ENTRY.match(s) or s in IRQEN for s in syms): return 'kernel entry and exit'
    return 'other'
def group(comm):
    if comm.startswith(('tun-rx','wan-rx','crypto-','sa-state','reorder-timer')) or comm=='espgw': return 'espgw'
    if comm == 'iperf3': return 'iperf3'
    if comm == 'swapper': return 'idle'
    return 'other'
TCP = re.compile(r'^(tcp_|__tcp_|tcp4_|tcp_v4)')
SOFTIRQ = re.compile(r'^(handle_softirqs|__do_softirq|net_rx_action|do_softirq)$')
def whose(frames):
    syms = [s for s,_ in frames]
    if any(TCP.match(s) for s in syms): return "LAN hosts' TCP, run in espgw's softirq"
    if any(SOFTIRQ.match(s) for s in syms): return 'other softirq work on espgw threads'
    return "espgw's own calls and code"
WHOSE = ["espgw's own calls and code", 'other softirq work on espgw threads', "LAN hosts' TCP, run in espgw's softirq"]
owner = collections.Counter()
counts = collections.Counter(); totals = collections.Counter(); n=0
comm=None; frames=[]
def flush():
    global n
    if comm is None: return
    g=group(comm); c=classify(frames, comm)
    counts[(g,c)]+=1; totals[g]+=1; n+=1
    if g == 'espgw': owner[whose(frames)] += 1
source = sys.stdin if len(sys.argv) < 2 or sys.argv[1] == '-' else open(sys.argv[1])
for line in source:
    if not line.strip():
        flush(); comm=None; frames=[]; continue
    if not line.startswith('\t') and not line.startswith(' '):
        comm=line.split()[0]; frames=[]; continue
    m=re.match(r'\s*[0-9a-f]+ (.+) \((.*)\)\s*$', line)
    if m: frames.append((re.sub(r'\+0x[0-9a-f]+$','',m.group(1)), m.group(2)))
flush()
cats=['wake-ups and scheduling','network stack','copies','kernel entry and exit','skb work','espgw bookkeeping','crypto','checksums','segmenting/coalescing','other','idle']
print('%-26s %8s %8s %8s %8s' % ('category','espgw','iperf3','other','machine'))
for c in cats:
    row=[100*counts[(g,c)]/max(1,totals[g]) for g in ('espgw','iperf3','other')]
    tot=100*sum(counts[(g,c)] for g in totals)/n
    print('%-26s %7.1f%% %7.1f%% %7.1f%% %7.1f%%' % (c,*row,tot))
print('samples', n, 'espgw share of machine %.1f%%' % (100*totals['espgw']/n), 'iperf3 %.1f%%' % (100*totals['iperf3']/n), 'idle %.1f%%'%(100*totals['idle']/n))
print()
print('%-42s %8s' % ("espgw's samples by whose work", 'share'))
for w in WHOSE:
    print('%-42s %7.1f%%' % (w, 100*owner[w]/max(1,totals['espgw'])))
