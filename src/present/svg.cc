// The node's topology as a self-contained SVG: devices in a ring, links coloured by type.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "present/labels.h"
#include "present/render.h"
#include "topology/enrich.h"

namespace rayaccel::present {

namespace {

std::string XmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        // Control bytes are not allowed in XML 1.0 text: shown as a space.
        out += (static_cast<unsigned char>(c) < 0x20 && c != '\t') ? ' ' : c;
    }
  }
  return out;
}

const char* LinkColour(LinkType type) {
  switch (type) {
    case LinkType::kNvlink:
      return "#76b900";
    case LinkType::kXgmi:
      return "#d7263d";
    case LinkType::kIci:
      return "#1f77b4";
    case LinkType::kScaleOut:
      return "#6f42c1";
    case LinkType::kOther:
      return "#fd7e14";
    default:
      return "#8d99ae";
  }
}

const char* HealthFill(Health health) {
  switch (health) {
    case Health::kHealthy:
      return "#e6f4ea";
    case Health::kUnhealthy:
      return "#fde2e4";
    default:
      return "#eef0f2";
  }
}

}  // namespace

std::string TopoSvg(const NodeSnapshot& s) {
  // Devices on a circle, in NUMA order, so that every pair's link is a chord; NUMA nodes named
  // outside the circle with their CPUs and nearest NICs; a legend counts links by kind.
  constexpr double kBoxW = 104, kBoxH = 44;
  constexpr size_t kMostLines = 400;  // beyond this many links, the legend alone
  const size_t n = s.devices.size();
  std::vector<std::string> labels = DeviceLabels(s);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return s.devices[a].numa_node < s.devices[b].numa_node;
  });
  const double radius = std::max(170.0, n * (kBoxW + 12) / (2 * 3.14159265358979));
  const double cx = radius + kBoxW + 150, cy = radius + kBoxH + 90;
  std::vector<double> x(n), y(n), angle(n);
  for (size_t k = 0; k < n; ++k) {
    angle[order[k]] = -3.14159265358979 / 2 + 2 * 3.14159265358979 * k / std::max<size_t>(n, 1);
    x[order[k]] = cx + radius * std::cos(angle[order[k]]);
    y[order[k]] = cy + radius * std::sin(angle[order[k]]);
  }
  // The link drawn between each pair: the best one (docs/topology.md), direct links only when
  // there are any, PCIe paths otherwise.
  struct Line {
    size_t a, b;
    const Link* link;
  };
  std::vector<Line> lines;
  bool any_direct = false;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      if (const Link* l = BestLink(s, a, b)) {
        lines.push_back({a, b, l});
        any_direct = any_direct || l->type != LinkType::kPcie;
      }
    }
  }
  if (any_direct) {
    lines.erase(std::remove_if(lines.begin(), lines.end(),
                               [](const Line& l) { return l.link->type == LinkType::kPcie; }),
                lines.end());
  }
  auto kind_of = [](const Link& link) {
    std::string kind = LinkLabel(link);
    if (link.bandwidth_mbps > 0) kind += ", " + Bandwidth(link.bandwidth_mbps);
    return kind;
  };
  std::map<std::string, std::pair<size_t, const Link*>> kinds;  // "NV18, 450 GB/s" -> count
  for (const Line& l : lines) {
    auto& entry = kinds[kind_of(*l.link)];
    ++entry.first;
    entry.second = l.link;
  }
  // Past kMostLines the chords would be a solid disc. A kind of link that joins every pair of
  // its devices (an NVL72 rack's NVSwitch fabric: 2556 NV18 chords among 72 GPUs) is then
  // drawn as what it is, a fabric: one hub, and a spoke to each of its devices.
  struct Hub {
    std::string kind;
    const Link* link;
    std::vector<size_t> members;
  };
  std::vector<Hub> hubs;
  if (lines.size() > kMostLines) {
    std::map<std::string, std::set<size_t>> ends;
    for (const Line& l : lines) {
      std::set<size_t>& e = ends[kind_of(*l.link)];
      e.insert(l.a);
      e.insert(l.b);
    }
    std::set<std::string> fabrics;
    for (const auto& [kind, members] : ends) {
      const size_t m = members.size();
      if (m > 2 && kinds[kind].first == m * (m - 1) / 2) {
        hubs.push_back({kind, kinds[kind].second, {members.begin(), members.end()}});
        fabrics.insert(kind);
      }
    }
    lines.erase(std::remove_if(lines.begin(), lines.end(),
                               [&](const Line& l) { return fabrics.count(kind_of(*l.link)); }),
                lines.end());
  }

  std::vector<std::string> notes;
  std::map<int, std::pair<std::string, std::set<std::string>>> numa;  // cpus, nics
  for (const Device& d : s.devices) {
    auto& entry = numa[d.numa_node];
    if (entry.first.empty()) entry.first = d.cpuset;
    entry.second.insert(d.nearest_nics.begin(), d.nearest_nics.end());
  }
  const double legend_y = cy + radius + kBoxH + 40;
  const double height = legend_y + 24 * (kinds.size() + s.domains.size() + numa.size() + 3);
  const double width = 2 * cx;
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
      width, height, width, height);
  absl::StrAppend(
      &out, "<title>",
      XmlEscape(absl::StrCat("rayaccel topology: ", n, " devices, generation ", s.generation)),
      "</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  size_t drawn_or_not = lines.size();
  for (const Hub& h : hubs) drawn_or_not += h.members.size() * (h.members.size() - 1) / 2;
  absl::StrAppend(&out, "<text x=\"16\" y=\"28\" font-size=\"16\" font-weight=\"bold\">",
                  XmlEscape(absl::StrCat(n, " devices, ", drawn_or_not, " links (snapshot ",
                                         s.generation, ")")),
                  "</text>\n");
  // NUMA groups: an arc behind their devices, named outside the circle.
  std::map<int, std::vector<size_t>> by_numa;
  for (size_t i = 0; i < n; ++i) by_numa[s.devices[i].numa_node].push_back(i);
  for (const auto& [node, members] : by_numa) {
    double sx = 0, sy = 0;
    for (size_t i : members) {
      sx += std::cos(angle[i]);
      sy += std::sin(angle[i]);
    }
    const double mean = std::atan2(sy, sx);
    const double lx = cx + (radius + kBoxW) * std::cos(mean);
    const double ly = cy + (radius + kBoxH + 20) * std::sin(mean);
    const auto& [cpus, nics] = numa[node];
    std::string text = node >= 0 ? absl::StrCat("NUMA ", node) : "NUMA unknown";
    if (!cpus.empty()) absl::StrAppend(&text, ", CPUs ", cpus);
    if (!nics.empty()) {
      absl::StrAppend(&text, ", NICs ", absl::StrJoin(nics.begin(), nics.end(), " "));
    }
    absl::StrAppendFormat(&out,
                          "<text class=\"numa\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                          "fill=\"#495057\">%s</text>\n",
                          lx, ly, XmlEscape(text));
  }
  // Links, under the devices.
  if (lines.size() <= kMostLines) {
    for (const Line& l : lines) {
      const Link& link = *l.link;
      const bool direct = link.type != LinkType::kPcie;
      std::string tip = absl::StrCat(labels[l.a], " - ", labels[l.b], ": ", LinkLabel(link));
      if (link.bandwidth_mbps > 0) absl::StrAppend(&tip, ", ", Bandwidth(link.bandwidth_mbps));
      absl::StrAppendFormat(
          &out,
          "<line class=\"link\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
          "stroke-width=\"%.1f\"%s><title>%s</title></line>\n",
          x[l.a], y[l.a], x[l.b], y[l.b], LinkColour(link.type),
          direct ? 1 + std::min<uint32_t>(link.count, 18) / 4.0 : 1.0,
          direct ? "" : " stroke-dasharray=\"4 3\"", XmlEscape(tip));
      if (lines.size() <= 12) {
        absl::StrAppendFormat(&out,
                              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                              "fill=\"%s\">%s</text>\n",
                              (x[l.a] + x[l.b]) / 2, (y[l.a] + y[l.b]) / 2 - 4,
                              LinkColour(link.type), XmlEscape(LinkLabel(link)));
      }
    }
  }
  // Fabrics: a hub inside the circle, a spoke to each device it joins.
  for (size_t k = 0; k < hubs.size(); ++k) {
    const Hub& h = hubs[k];
    const double a = 2 * 3.14159265358979 * k / hubs.size();
    const double hx = cx + (hubs.size() > 1 ? radius / 3 * std::cos(a) : 0);
    const double hy = cy + (hubs.size() > 1 ? radius / 3 * std::sin(a) : 0);
    const std::string colour = LinkColour(h.link->type);
    for (size_t i : h.members) {
      absl::StrAppendFormat(&out,
                            "<line class=\"spoke\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                            "y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" "
                            "stroke-opacity=\"0.6\"/>\n",
                            hx, hy, x[i], y[i], colour);
    }
    const std::string text =
        absl::StrCat(h.kind, " between every pair of ", h.members.size(), " devices");
    absl::StrAppendFormat(&out,
                          "<g class=\"fabric\"><title>%s</title><rect x=\"%.1f\" y=\"%.1f\" "
                          "width=\"240\" height=\"44\" rx=\"8\" fill=\"white\" stroke=\"%s\" "
                          "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\" "
                          "text-anchor=\"middle\" font-weight=\"bold\">%s</text><text "
                          "x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                          "fill=\"#495057\">%s</text></g>\n",
                          XmlEscape(text), hx - 120, hy - 22, colour, hx, hy - 4,
                          XmlEscape(absl::StrCat(h.kind, " fabric")), hx, hy + 13,
                          XmlEscape(absl::StrCat(h.members.size(), " devices, every pair")));
  }
  // Devices.
  for (size_t i = 0; i < n; ++i) {
    const Device& d = s.devices[i];
    std::string tip = absl::StrCat(labels[i], ": ", d.name, " (", d.id, "), ", HealthName(d.health),
                                   d.health_reason.empty() ? "" : ": " + d.health_reason);
    absl::StrAppendFormat(
        &out,
        "<g class=\"device %s\"><title>%s</title>"
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" rx=\"6\" fill=\"%s\" "
        "stroke=\"%s\" stroke-width=\"1.5\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#495057\">%s</text></g>\n",
        HealthName(d.health), XmlEscape(tip), x[i] - kBoxW / 2, y[i] - kBoxH / 2, kBoxW, kBoxH,
        HealthFill(d.health), d.health == Health::kUnhealthy ? "#d7263d" : "#495057", x[i],
        y[i] - 3, XmlEscape(labels[i]), x[i], y[i] + 13, XmlEscape(OrDash(d.accelerator_type)));
  }
  // Legend: links by kind, domains.
  double ly = legend_y;
  if (lines.size() > kMostLines) {
    absl::StrAppendFormat(&out, "<text x=\"16\" y=\"%.1f\">%s</text>\n", ly,
                          XmlEscape(absl::StrCat(lines.size(), " links: too many to draw")));
    ly += 20;
  }
  for (const auto& [kind, entry] : kinds) {
    absl::StrAppendFormat(
        &out,
        "<line x1=\"16\" y1=\"%.1f\" x2=\"46\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"3\"/><text class=\"legend\" x=\"54\" y=\"%.1f\">%s</text>\n",
        ly - 4, ly - 4, LinkColour(entry.second->type), ly,
        XmlEscape(absl::StrCat(entry.first, " x ", kind)));
    ly += 20;
  }
  for (const Domain& d : s.domains) {
    std::vector<std::string> members;
    for (size_t p : d.devices) {
      if (p < labels.size()) members.push_back(labels[p]);
    }
    if (members.size() > 16) {  // a rack's domain: its size and ends, not 72 names in a line
      members = {
          absl::StrCat(members.size(), " devices: ", members.front(), " ... ", members.back())};
    }
    absl::StrAppendFormat(
        &out, "<text class=\"domain\" x=\"16\" y=\"%.1f\">%s</text>\n", ly,
        XmlEscape(absl::StrCat(d.kind, " domain ", d.id, ": ", absl::StrJoin(members, " "))));
    ly += 20;
  }
  return out + "</svg>\n";
}

}  // namespace rayaccel::present
