//! The IAM permissions Compute Engine checks for each method the emulator serves (from the Compute Engine IAM
//! permissions reference).

/// The permissions `method` (`instanceGroupManagers.get`, ...) needs; empty for a method the emulator does not
/// serve.
pub fn permissions(method: &str) -> &'static [&'static str] {
    match method {
        "instanceGroupManagers.aggregatedList" => &["compute.instanceGroupManagers.list"],
        "instanceGroupManagers.get" | "instanceGroupManagers.listManagedInstances" => {
            &["compute.instanceGroupManagers.get"]
        }
        "instanceGroupManagers.createInstances" | "instanceGroupManagers.deleteInstances" => {
            &["compute.instanceGroupManagers.update"]
        }
        "instanceGroupManagers.setInstanceTemplate" => {
            &["compute.instanceGroupManagers.update", "compute.instanceTemplates.useReadOnly"]
        }
        "instances.get" => &["compute.instances.get"],
        "disks.get" => &["compute.disks.get"],
        "instanceTemplates.list" => &["compute.instanceTemplates.list"],
        "instanceTemplates.get" => &["compute.instanceTemplates.get"],
        // The copy's boot image is read when the template is created.
        "instanceTemplates.insert" => &["compute.instanceTemplates.create", "compute.images.useReadOnly"],
        "instanceTemplates.delete" => &["compute.instanceTemplates.delete"],
        "zoneOperations.get" | "zoneOperations.wait" => &["compute.zoneOperations.get"],
        "globalOperations.get" | "globalOperations.wait" => &["compute.globalOperations.get"],
        _ => &[],
    }
}
