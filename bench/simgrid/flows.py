"""The flows.cpp replay through SimGrid's Python bindings (python3-simgrid): same input, same output.

Run with the interpreter the bindings are built for (Debian: /usr/bin/python3):
    python3 flows.py FLOWS.txt --cfg=...   (prints "wall_s W cpu_s C" for e.run(), then one finish time per flow)
"""

import sys
import time

import simgrid as sg


def main() -> None:
    path, cfg = sys.argv[1], sys.argv[2:]
    engine = sg.Engine([sys.argv[0], *cfg])
    with open(path) as f:
        tokens = f.read().split()
    at = 0
    n_links = int(tokens[at]); at += 1
    zone = sg.NetZone.create_star_zone("world")
    links = []
    for i in range(n_links):
        links.append(zone.create_link(f"l{i}", float(tokens[at])).set_latency(0).seal())
        at += 1
    n_flows = int(tokens[at]); at += 1
    start, size, src, dst = [], [], [], []
    for i in range(n_flows):
        start.append(float(tokens[at])); size.append(int(float(tokens[at + 1]))); hops = int(tokens[at + 2])
        route = [sg.LinkInRoute(links[int(x)]) for x in tokens[at + 3:at + 3 + hops]]
        at += 3 + hops
        src.append(zone.create_host(f"s{i}", 1e9)); dst.append(zone.create_host(f"d{i}", 1e9))
        zone.add_route(src[i].netpoint, None, None, None, route, False)
        zone.add_route(None, dst[i].netpoint, None, None, [], False)
    zone.seal()
    comms = [None] * n_flows

    def driver():
        for i in range(n_flows):
            sg.this_actor.sleep_until(start[i])
            comms[i] = sg.Comm.sendto_async(src[i], dst[i], size[i])
        for comm in comms:
            comm.wait()

    sg.Actor.create("driver", src[0], driver)
    t0, c0 = time.perf_counter(), time.process_time()
    engine.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"wall_s {wall:.9f} cpu_s {cpu:.9f}")
    for comm in comms:
        print(repr(comm.finish_time))


if __name__ == "__main__":
    main()
