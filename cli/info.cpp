// anyep info — this machine as anyep sees it: the build, GPUs (with NUMA node and peer access),
// NUMA nodes, NICs and RDMA devices, libfabric's providers, what each transport anyep can open
// here guarantees and what the proxy emulates on it, and the paths an LL Buffer would take.
// Reads; changes nothing. --json prints the same as one JSON document.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "anyep/version.h"
#include "args.h"
#include "commands.h"
#include "common/env.h"
#include "common/error.h"
#include "gpus.h"
#include "json.h"
#include "process.h"
#include "report.h"
#include "transport/factory.h"

#ifdef ANYEP_CLI_LIBFABRIC
#include <rdma/fabric.h>

#include "transport/libfabric/libfabric_transport.h"
#endif

namespace anyep::cli {
namespace {

const Command& command() {
  static const Command c{
      "anyep info [options]",
      "This machine as anyep sees it: the build and its paths, GPUs (NUMA node, peer access), NUMA nodes,\n"
      "NICs and RDMA devices, libfabric's providers, what each transport anyep can open here guarantees\n"
      "(write ordering, immediate size, native atomics, GPU memory registration) and what the proxy emulates\n"
      "on it, and the paths an LL Buffer would take with the current environment.",
      {{"--json", nullptr, "print it as one JSON document on stdout"}},
      "exit status: 0, or 2 for a bad command line or environment variable\n"};
  return c;
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string yes(bool b) { return b ? "yes" : "no"; }

Json build_json() {
  Json b = Json::object();
  b.set("version", ANYEP_VERSION_STRING);
#ifdef ANYEP_CLI_CUDA
  b.set("cuda", true);
#else
  b.set("cuda", false);
#endif
#ifdef ANYEP_CLI_LIBFABRIC
  b.set("libfabric", true);
#else
  b.set("libfabric", false);
#endif
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  b.set("executable", n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string("?"));
  b.set("source_dir", ANYEP_SOURCE_DIR);
  b.set("configured_prefix", ANYEP_INSTALL_PREFIX);  // CMAKE_INSTALL_PREFIX at configure time
  // Where `import anyep` would come from (found, not imported: importing loads torch).
  const std::string tmp = temp_file(".txt");
  std::string why;
  const int rc = run_process({"python3", "-c",
                              "import importlib.util as u, sys\n"
                              "s = u.find_spec('anyep')\n"
                              "open(sys.argv[1], 'w').write(s.origin if s and s.origin else '')",
                              tmp},
                             60, true, true, &why);
  const std::string origin = rc == 0 ? read_line(tmp) : "";
  ::unlink(tmp.c_str());
  b.set("python_package", origin.empty() ? "not found by python3" : origin);
  return b;
}

Json gpus_json(std::string* why) {
  Json a = Json::array();
  for (const Gpu& g : list_gpus(why)) {
    Json j = Json::object();
    j.set("ordinal", g.ordinal);
    j.set("name", g.name);
    j.set("pci", g.pci);
    j.set("numa_node", g.numa_node);
    j.set("memory_gib", g.memory_gib);
    j.set("sms", g.sms);
    Json peers = Json::array();
    for (size_t k = 0; k < g.peer.size(); ++k)
      if (g.peer[k] && static_cast<int>(k) != g.ordinal) peers.push(static_cast<int64_t>(k));
    j.set("peer_access_to", peers);
    a.push(j);
  }
  return a;
}

Json numa_json() {
  Json a = Json::array();
  for (const std::string& n : list_dir("/sys/devices/system/node")) {
    if (n.rfind("node", 0) != 0 || n.size() < 5 || !std::isdigit(static_cast<unsigned char>(n[4]))) continue;
    Json j = Json::object();
    j.set("node", std::atoi(n.c_str() + 4));
    j.set("cpus", read_line("/sys/devices/system/node/" + n + "/cpulist"));
    std::ifstream mi("/sys/devices/system/node/" + n + "/meminfo");
    for (std::string line; std::getline(mi, line);)
      if (const size_t at = line.find("MemTotal:"); at != std::string::npos) {
        j.set("memory_gib", std::atof(line.c_str() + at + 9) / (1024.0 * 1024.0));
        break;
      }
    a.push(j);
  }
  return a;
}

Json nics_json() {
  Json nics = Json::object(), net = Json::array(), rdma = Json::array();
  for (const std::string& n : list_dir("/sys/class/net")) {
    const std::string d = "/sys/class/net/" + n;
    Json j = Json::object();
    j.set("name", n);
    j.set("state", read_line(d + "/operstate"));
    const std::string speed = read_line(d + "/speed");
    j.set("speed_mbps",
          speed.empty() || speed[0] == '-' ? Json() : Json(static_cast<int64_t>(std::atoll(speed.c_str()))));
    const std::string numa = read_line(d + "/device/numa_node");
    j.set("numa_node", numa.empty() ? Json() : Json(std::atoi(numa.c_str())));
    net.push(j);
  }
  for (const std::string& n : list_dir("/sys/class/infiniband")) {
    const std::string d = "/sys/class/infiniband/" + n;
    Json j = Json::object();
    j.set("name", n);
    Json ports = Json::array();
    for (const std::string& p : list_dir(d + "/ports")) {
      Json jp = Json::object();
      jp.set("port", p);
      jp.set("state", read_line(d + "/ports/" + p + "/state"));
      jp.set("link_layer", read_line(d + "/ports/" + p + "/link_layer"));
      jp.set("rate", read_line(d + "/ports/" + p + "/rate"));
      ports.push(jp);
    }
    j.set("ports", ports);
    const std::string numa = read_line(d + "/device/numa_node");
    j.set("numa_node", numa.empty() ? Json() : Json(std::atoi(numa.c_str())));
    rdma.push(j);
  }
  nics.set("net", net);
  nics.set("rdma", rdma);
  return nics;
}

Json libfabric_json() {
  Json l = Json::object();
#ifdef ANYEP_CLI_LIBFABRIC
  const uint32_t v = fi_version();
  l.set("version", std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v)));
  fi_info* info = nullptr;
  Json provs = Json::array();
  if (fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, nullptr, &info) == 0) {
    std::set<std::string> seen;
    for (fi_info* i = info; i; i = i->next)
      if (i->fabric_attr && i->fabric_attr->prov_name && seen.insert(i->fabric_attr->prov_name).second)
        provs.push(i->fabric_attr->prov_name);
    fi_freeinfo(info);
  }
  l.set("providers", provs);
#else
  l.set("version", "not built in (libfabric was not found when anyep was built)");
#endif
  return l;
}

// What anyep's transport `name` guarantees here, and what the proxy makes up for.
Json transport_json(const std::string& name) {
  Json j = Json::object();
  j.set("name", name);
  std::string why;
  if (!transport::available(name, &why)) {
    j.set("available", false);
    j.set("why", why);
    return j;
  }
  try {
    transport::TransportSpec spec = transport::TransportSpec::from_env(name, 0, 1);
    spec.chaos.reset();
    const auto t = transport::make_transport(spec);
    const transport::Capabilities& c = t->capabilities();
    j.set("available", true);
    j.set("backend", c.backend);
    j.set("provider", c.provider);
    j.set("ordered_writes", c.ordered_writes);
    j.set("immediate_bytes", c.imm_bytes);
    j.set("native_atomics", c.native_atomics);
    j.set("placed_writes", c.placed_writes);
    j.set("gpu_memory_registration", c.gpu_memory);
    j.set("max_write_bytes", c.max_write_bytes);
    j.set("nics", c.num_nics);
    Json emulated = Json::array();
    emulated.push(c.ordered_writes ? "nothing for ordering (engine bypassed under ANYEP_PROXY_ORDERING=auto)"
                                   : "signal-after-data ordering (the receiver's ordering engine)");
    // What the proxy does for signals under ANYEP_PROXY_ATOMICS (docs/proxy.md).
    const bool native_asked = env::get_enum("ANYEP_PROXY_ATOMICS") == "native";
    if (native_asked && c.native_atomics && c.placed_writes)
      emulated.push(
          "nothing for atomics: signals go as the transport's remote atomic adds (ANYEP_PROXY_ATOMICS=native)");
    else if (native_asked)
      emulated.push(std::string("remote atomics: ANYEP_PROXY_ATOMICS=native cannot be served here (") +
                    (!c.native_atomics ? (c.atomics_note.empty() ? "no remote atomic add" : c.atomics_note)
                                       : "write completions do not mean placement") +
                    "): a proxy over it refuses to start");
    else
      emulated.push(
          "remote atomics: signals are applied by the receiving proxy (ANYEP_PROXY_ATOMICS=emulated; =native asks the "
          "transport for remote atomic adds)");
    if (!c.gpu_memory && c.backend == "libfabric")
      emulated.push("GPU memory registration: the LL buffer is host-staged (pinned host memory mapped into the GPU)");
#ifdef ANYEP_CLI_LIBFABRIC
    if (c.backend == "libfabric") j.set("negotiated", transport::libfabric::describe(*t));
#endif
    j.set("proxy_emulates", emulated);
  } catch (const std::exception& e) {
    j.set("available", false);
    j.set("why", std::string("could not open an endpoint: ") + e.what());
  }
  return j;
}

// The paths an LL Buffer takes with the current environment.
Json paths_json(const Json& transports, size_t gpus) {
  Json p = Json::object();
  const std::string path = env::get_enum("ANYEP_LL_PATH");
  const std::string ll = path.empty() ? "auto" : path;
  p.set("ANYEP_LL_PATH", ll);
  p.set("proxy_threads", env::get_count("ANYEP_PROXY_THREADS"));
  p.set("proxy_ordering", env::get_enum("ANYEP_PROXY_ORDERING"));
  p.set("proxy_atomics", env::get_enum("ANYEP_PROXY_ATOMICS"));
  const Json* lf = nullptr;
  const std::string fi = env::get_enum("ANYEP_FI_PROVIDER");
  for (const Json& t : transports.items()) {
    const Json* n = t.find("name");
    if (n && n->str() == "libfabric") lf = &t;
  }
  std::string lf_text = "libfabric (not available here)";
  bool lf_gpu = false;
  if (lf && lf->find("available") && lf->find("provider") && lf->find("gpu_memory_registration")) {
    lf_text = "libfabric provider " + lf->find("provider")->str();
    lf_gpu = lf->find("gpu_memory_registration")->kind() == Json::Kind::kBool &&
             lf->find("gpu_memory_registration")->dump(-1) == "true";
  }
  std::vector<std::string> lines;
  if (ll == "auto") {
    lines.push_back("peers on this host whose GPU this GPU can reach (" + std::to_string(gpus) +
                    " GPU(s) here): direct stores through CUDA IPC");
    lines.push_back("other peers: the CPU proxy over " + lf_text +
                    (lf_gpu ? ", the LL buffer in GPU memory (FI_HMEM)"
                            : ": it cannot register GPU memory, so a Buffer with such peers fails; "
                              "ANYEP_LL_PATH=proxy-libfabric stages the buffer in host memory"));
  } else if (ll == "proxy-libfabric") {
    lines.push_back("every peer: the CPU proxy over " + lf_text +
                    (lf_gpu ? ", the LL buffer in GPU memory" : ", the LL buffer host-staged (pinned host memory)"));
  } else {
    lines.push_back("every peer: the CPU proxy over the cuda-ipc transport (copy engines; emulated multi-node)");
  }
  lines.push_back(
      "high-throughput (HT) mode: ranks on this host over direct stores (CUDA IPC); ranks on other hosts: "
      "not built yet (internode HT)");
  Json a = Json::array();
  for (const std::string& s : lines) a.push(s);
  p.set("ll_buffer", a);
  if (!fi.empty()) p.set("ANYEP_FI_PROVIDER", fi);
  return p;
}

Json env_json() {
  Json e = Json::object();
  for (const env::VarInfo& v : env::all_vars())
    if (const char* val = std::getenv(v.name); val && *val)
      e.set(v.name, v.type == env::Type::kSecret ? std::string("(set, not shown)") : std::string(val));
  return e;
}

void print_text(const Json& doc, FILE* f) {
  auto get = [](const Json& j, const char* k) -> std::string {
    const Json* v = j.find(k);
    if (!v || v->kind() == Json::Kind::kNull) return "-";
    return v->kind() == Json::Kind::kString ? v->str() : v->dump(-1);
  };
  const Json& b = *doc.find("build");
  std::fprintf(f, "anyep %s  (built with CUDA: %s, libfabric: %s)\n", get(b, "version").c_str(),
               get(b, "cuda") == "true" ? "yes" : "no", get(b, "libfabric") == "true" ? "yes" : "no");
  std::fprintf(f,
               "  executable         %s\n  source             %s\n  configured prefix  %s\n  python package     %s\n",
               get(b, "executable").c_str(), get(b, "source_dir").c_str(), get(b, "configured_prefix").c_str(),
               get(b, "python_package").c_str());
  const Json& gpus = *doc.find("gpus");
  std::fprintf(f, "\nGPUs: %zu%s%s\n", gpus.items().size(), gpus.items().empty() ? ": " : "",
               gpus.items().empty() ? get(doc, "gpus_why").c_str() : "");
  for (const Json& g : gpus.items())
    std::fprintf(f, "  %s: %s, %s, NUMA node %s, %.0f GiB, %s SMs, peer access to %s\n", get(g, "ordinal").c_str(),
                 get(g, "name").c_str(), get(g, "pci").c_str(), get(g, "numa_node").c_str(),
                 g.find("memory_gib")->number(), get(g, "sms").c_str(), get(g, "peer_access_to").c_str());
  std::fprintf(f, "\nNUMA nodes:\n");
  for (const Json& n : doc.find("numa")->items())
    std::fprintf(f, "  node %s: CPUs %s, %.1f GiB\n", get(n, "node").c_str(), get(n, "cpus").c_str(),
                 n.find("memory_gib") ? n.find("memory_gib")->number() : 0.0);
  std::fprintf(f, "\nNICs:\n");
  for (const Json& n : doc.find("nics")->find("net")->items())
    std::fprintf(f, "  %-16s %-8s speed %s Mb/s, NUMA node %s\n", get(n, "name").c_str(), get(n, "state").c_str(),
                 get(n, "speed_mbps").c_str(), get(n, "numa_node").c_str());
  const Json& rdma = *doc.find("nics")->find("rdma");
  std::fprintf(f, "  RDMA devices: %s\n", rdma.items().empty() ? "none" : "");
  for (const Json& n : rdma.items())
    std::fprintf(f, "    %s ports %s\n", get(n, "name").c_str(), get(n, "ports").c_str());
  const Json& lf = *doc.find("libfabric");
  std::fprintf(f, "\nlibfabric %s; providers: %s\n", get(lf, "version").c_str(), get(lf, "providers").c_str());
  std::fprintf(f, "\ntransports anyep can open here (what the provider guarantees; what the proxy emulates):\n");
  for (const Json& t : doc.find("transports")->items()) {
    if (get(t, "available") != "true") {
      std::fprintf(f, "  %-10s not available: %s\n", get(t, "name").c_str(), get(t, "why").c_str());
      continue;
    }
    std::fprintf(f,
                 "  %-10s %s/%s: ordered writes %s, immediate %s bytes, native atomics %s, writes placed at completion "
                 "%s, GPU memory %s\n",
                 get(t, "name").c_str(), get(t, "backend").c_str(), get(t, "provider").c_str(),
                 yes(get(t, "ordered_writes") == "true").c_str(), get(t, "immediate_bytes").c_str(),
                 yes(get(t, "native_atomics") == "true").c_str(), yes(get(t, "placed_writes") == "true").c_str(),
                 yes(get(t, "gpu_memory_registration") == "true").c_str());
    for (const Json& e : t.find("proxy_emulates")->items())
      std::fprintf(f, "             emulated: %s\n", e.str().c_str());
  }
  const Json& p = *doc.find("paths");
  std::fprintf(f, "\nLL Buffer paths (ANYEP_LL_PATH=%s, %s proxy threads, ordering %s, signals %s):\n",
               get(p, "ANYEP_LL_PATH").c_str(), get(p, "proxy_threads").c_str(), get(p, "proxy_ordering").c_str(),
               get(p, "proxy_atomics").c_str());
  for (const Json& l : p.find("ll_buffer")->items()) std::fprintf(f, "  %s\n", l.str().c_str());
  const Json& e = *doc.find("environment");
  std::fprintf(f, "\nanyep environment variables set: %s\n", e.items().empty() ? "none" : e.dump(-1).c_str());
}

}  // namespace

int info(int argc, char** argv, int first) {
  const Command& cmd = command();
  bool json = false;
  if (const auto rc = parse_command(cmd, argc, argv, first, "anyep info",
                                    [&](const std::string& a, const std::string&) { json = json || a == "--json"; }))
    return *rc;
  try {
    Json doc = Json::object();
    doc.set("build", build_json());
    std::string gpu_why;
    doc.set("gpus", gpus_json(&gpu_why));
    if (!gpu_why.empty()) doc.set("gpus_why", gpu_why);
    doc.set("numa", numa_json());
    doc.set("nics", nics_json());
    doc.set("libfabric", libfabric_json());
    Json transports = Json::array();
    for (const std::string& n : transport::transport_names()) transports.push(transport_json(n));
    doc.set("paths", paths_json(transports, doc.find("gpus")->items().size()));
    doc.set("transports", transports);
    doc.set("environment", env_json());
    if (json)
      std::printf("%s\n", doc.dump().c_str());
    else
      print_text(doc, stdout);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "anyep info: %s\n%s", e.what(), help_text(cmd).c_str());
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace anyep::cli
