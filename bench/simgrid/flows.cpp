// Replays a flow set with pinned paths on SimGrid's S4U (pure max-min: CM02, factors 1, no cross-traffic).
// Input (text): n_links, then n_links capacities (B/s); n_flows, then per flow: start_s bytes k link_1..link_k.
// Each flow gets its own source and sink host in a star zone: route(src_i -> dst_i) = the flow's links.
// Output (stdout): "wall_s <seconds of e.run()> cpu_s <process CPU seconds of it>", then one finish time per
// flow, in input order.
#include <simgrid/s4u.hpp>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

namespace sg4 = simgrid::s4u;

int main(int argc, char** argv)
{
  sg4::Engine engine(&argc, argv);
  std::ifstream in(argv[1]);
  size_t n_links = 0;
  in >> n_links;
  auto* zone = sg4::create_star_zone("world");
  std::vector<sg4::Link*> links;
  for (size_t i = 0; i < n_links; i++) {
    double capacity;
    in >> capacity;
    links.push_back(zone->create_link("l" + std::to_string(i), capacity)->set_latency(0)->seal());
  }
  size_t n_flows = 0;
  in >> n_flows;
  std::vector<double> start(n_flows);
  std::vector<uint64_t> bytes(n_flows);
  std::vector<sg4::Host*> src(n_flows), dst(n_flows);
  for (size_t i = 0; i < n_flows; i++) {
    size_t hops;
    double size;
    in >> start[i] >> size >> hops;
    bytes[i] = static_cast<uint64_t>(size);
    std::vector<sg4::LinkInRoute> route;
    for (size_t h = 0; h < hops; h++) {
      size_t link;
      in >> link;
      route.emplace_back(links[link]);
    }
    src[i] = zone->create_host("s" + std::to_string(i), 1e9);
    dst[i] = zone->create_host("d" + std::to_string(i), 1e9);
    zone->add_route(src[i]->get_netpoint(), nullptr, nullptr, nullptr, route, false);
    zone->add_route(nullptr, dst[i]->get_netpoint(), nullptr, nullptr, {}, false);
  }
  zone->seal();
  std::vector<sg4::CommPtr> comms(n_flows);
  sg4::Actor::create("driver", src[0], [&]() {
    for (size_t i = 0; i < n_flows; i++) {
      sg4::this_actor::sleep_until(start[i]);
      comms[i] = sg4::Comm::sendto_async(src[i], dst[i], bytes[i]);
    }
    for (auto& comm : comms)
      comm->wait();
  });
  auto t0 = std::chrono::steady_clock::now();
  std::clock_t c0 = std::clock();
  engine.run();
  double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wall_s %.9f cpu_s %.9f\n", wall, cpu);
  for (auto& comm : comms)
    std::printf("%.17g\n", comm->get_finish_time());
  return 0;
}
