//! The EC2 operations' parameters and the reading of their answers. The answers are shaped as the EC2 API
//! reference's examples of each action (docs.aws.amazon.com/AWSEC2/latest/APIReference, "Examples" of
//! DescribeInstances, DescribeLaunchTemplateVersions, CreateLaunchTemplateVersion, ModifyLaunchTemplate,
//! CreateLaunchTemplate), with the element names of the EC2 model (the `locationName`s aws-sdk-ec2 1.208 reads).

use super::*;
use crate::aws::xml;

fn parse(document: &str) -> Element {
    xml::parse(document).expect("well-formed")
}

#[test]
fn each_operation_sends_the_ec2_models_query_names() {
    assert_eq!(
        describe_instances_params(&["i-1234567890abcdef0"]).encode(),
        "Action=DescribeInstances&Version=2016-11-15&InstanceId.1=i-1234567890abcdef0"
    );
    assert_eq!(
        describe_launch_template_versions_params(TemplateRef::Id("lt-0a20c965061f64abc"), &["$Default", "$Latest"])
            .encode(),
        "Action=DescribeLaunchTemplateVersions&Version=2016-11-15&LaunchTemplateId=lt-0a20c965061f64abc\
         &LaunchTemplateVersion.1=%24Default&LaunchTemplateVersion.2=%24Latest"
    );
    assert_eq!(
        describe_launch_template_versions_params(TemplateRef::Name("workers"), &["3"]).encode(),
        "Action=DescribeLaunchTemplateVersions&Version=2016-11-15&LaunchTemplateName=workers&LaunchTemplateVersion.1=3"
    );
    // As set_group_image sends it: the default version's number as the source, the new AMI as the only data.
    assert_eq!(
        create_launch_template_version_params(
            TemplateRef::Id("lt-0a20c965061f64abc"),
            "1",
            "ami-0bbbbbbbbbbbbbbb2",
            "update-operator: image ami-0bbbbbbbbbbbbbbb2"
        )
        .encode(),
        "Action=CreateLaunchTemplateVersion&Version=2016-11-15&LaunchTemplateId=lt-0a20c965061f64abc\
         &SourceVersion=1&VersionDescription=update-operator%3A%20image%20ami-0bbbbbbbbbbbbbbb2\
         &LaunchTemplateData.ImageId=ami-0bbbbbbbbbbbbbbb2"
    );
    assert_eq!(
        modify_launch_template_params(TemplateRef::Name("workers"), "2").encode(),
        "Action=ModifyLaunchTemplate&Version=2016-11-15&LaunchTemplateName=workers&SetDefaultVersion=2"
    );
    assert_eq!(
        create_launch_template_params("g-template", "ami-0aaaaaaaaaaaaaaa1", "t3.micro").encode(),
        "Action=CreateLaunchTemplate&Version=2016-11-15&LaunchTemplateName=g-template\
         &LaunchTemplateData.ImageId=ami-0aaaaaaaaaaaaaaa1&LaunchTemplateData.InstanceType=t3.micro"
    );
}

const DESCRIBE_INSTANCES: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>8f7724cf-496f-496e-8fe3-example</requestId>
    <reservationSet>
        <item>
            <reservationId>r-1234567890abcdef0</reservationId>
            <ownerId>123456789012</ownerId>
            <groupSet/>
            <instancesSet>
                <item>
                    <instanceId>i-1234567890abcdef0</instanceId>
                    <imageId>ami-bff32ccc</imageId>
                    <instanceState>
                        <code>16</code>
                        <name>running</name>
                    </instanceState>
                    <privateDnsName>ip-192-168-1-88.eu-west-1.compute.internal</privateDnsName>
                    <dnsName>ec2-54-194-252-215.eu-west-1.compute.amazonaws.com</dnsName>
                    <reason/>
                    <keyName>my_keypair</keyName>
                    <amiLaunchIndex>0</amiLaunchIndex>
                    <productCodes/>
                    <instanceType>t2.micro</instanceType>
                    <launchTime>2018-05-08T16:46:19.000Z</launchTime>
                    <placement>
                        <availabilityZone>eu-west-1c</availabilityZone>
                        <groupName/>
                        <tenancy>default</tenancy>
                    </placement>
                    <monitoring>
                        <state>disabled</state>
                    </monitoring>
                    <subnetId>subnet-56f5f000</subnetId>
                    <vpcId>vpc-11112222</vpcId>
                    <privateIpAddress>192.168.1.88</privateIpAddress>
                    <sourceDestCheck>true</sourceDestCheck>
                    <groupSet>
                        <item>
                            <groupId>sg-e4076000</groupId>
                            <groupName>SecurityGroup1</groupName>
                        </item>
                    </groupSet>
                    <architecture>x86_64</architecture>
                    <rootDeviceType>ebs</rootDeviceType>
                    <rootDeviceName>/dev/xvda</rootDeviceName>
                    <blockDeviceMapping>
                        <item>
                            <deviceName>/dev/xvda</deviceName>
                            <ebs>
                                <volumeId>vol-1234567890abcdef0</volumeId>
                                <status>attached</status>
                                <attachTime>2015-12-22T10:44:09.000Z</attachTime>
                                <deleteOnTermination>true</deleteOnTermination>
                            </ebs>
                        </item>
                    </blockDeviceMapping>
                    <virtualizationType>hvm</virtualizationType>
                    <clientToken>xMcwG14507example</clientToken>
                    <tagSet>
                        <item>
                            <key>Name</key>
                            <value>Server_1</value>
                        </item>
                    </tagSet>
                    <hypervisor>xen</hypervisor>
                    <networkInterfaceSet>
                        <item>
                            <networkInterfaceId>eni-551ba000</networkInterfaceId>
                            <privateDnsName>ip-192-168-1-99.eu-west-1.compute.internal</privateDnsName>
                            <status>in-use</status>
                        </item>
                    </networkInterfaceSet>
                    <ebsOptimized>false</ebsOptimized>
                </item>
            </instancesSet>
        </item>
        <item>
            <reservationId>r-0000000000000000b</reservationId>
            <instancesSet>
                <item>
                    <instanceId>i-0fedcba9876543210</instanceId>
                    <imageId>ami-12345678</imageId>
                    <instanceState><code>0</code><name>pending</name></instanceState>
                    <privateDnsName/>
                </item>
            </instancesSet>
        </item>
    </reservationSet>
</DescribeInstancesResponse>"#;

#[test]
fn describe_instances_answers_are_read_across_reservations_from_each_instances_own_fields() {
    let instances = instances_of(&parse(DESCRIBE_INSTANCES)).unwrap();
    assert_eq!(
        instances,
        [
            Instance {
                instance_id: "i-1234567890abcdef0".into(),
                image_id: Some("ami-bff32ccc".into()),
                state: Some("running".into()),
                // The instance's, not its network interface's.
                private_dns_name: Some("ip-192-168-1-88.eu-west-1.compute.internal".into()),
            },
            Instance {
                instance_id: "i-0fedcba9876543210".into(),
                image_id: Some("ami-12345678".into()),
                state: Some("pending".into()),
                private_dns_name: None,
            },
        ]
    );
    let empty = "<DescribeInstancesResponse><requestId>x</requestId><reservationSet/></DescribeInstancesResponse>";
    assert!(instances_of(&parse(empty)).unwrap().is_empty());
    let no_id = "<DescribeInstancesResponse><reservationSet><item><instancesSet><item><imageId>ami-1</imageId>\
                 </item></instancesSet></item></reservationSet></DescribeInstancesResponse>";
    let error = instances_of(&parse(no_id)).unwrap_err();
    assert_eq!(error.to_string(), "DescribeInstances: the answer has no instanceId");
}

const DESCRIBE_LAUNCH_TEMPLATE_VERSIONS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeLaunchTemplateVersionsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>65cadec1-b364-4354-8ca8-4176dexample</requestId>
    <launchTemplateVersionSet>
        <item>
            <createTime>2017-10-31T11:38:52.000Z</createTime>
            <createdBy>arn:aws:iam::123456789012:root</createdBy>
            <defaultVersion>true</defaultVersion>
            <launchTemplateData>
                <imageId>ami-8c1be5f6</imageId>
                <instanceType>t2.micro</instanceType>
                <networkInterfaceSet>
                    <item>
                        <associatePublicIpAddress>true</associatePublicIpAddress>
                        <deviceIndex>0</deviceIndex>
                        <subnetId>subnet-7b16de0c</subnetId>
                    </item>
                </networkInterfaceSet>
            </launchTemplateData>
            <launchTemplateId>lt-0a20c965061f64abc</launchTemplateId>
            <launchTemplateName>MyLaunchTemplate</launchTemplateName>
            <versionDescription>FirstVersion</versionDescription>
            <versionNumber>1</versionNumber>
        </item>
        <item>
            <createTime>2017-10-31T11:52:03.000Z</createTime>
            <createdBy>arn:aws:iam::123456789012:root</createdBy>
            <defaultVersion>false</defaultVersion>
            <launchTemplateData>
                <instanceType>t2.micro</instanceType>
            </launchTemplateData>
            <launchTemplateId>lt-0a20c965061f64abc</launchTemplateId>
            <launchTemplateName>MyLaunchTemplate</launchTemplateName>
            <versionDescription>WebVersion1</versionDescription>
            <versionNumber>2</versionNumber>
        </item>
    </launchTemplateVersionSet>
</DescribeLaunchTemplateVersionsResponse>"#;

#[test]
fn launch_template_versions_are_read_with_their_number_default_and_image() {
    let versions = template_versions_of(&parse(DESCRIBE_LAUNCH_TEMPLATE_VERSIONS)).unwrap();
    assert_eq!(
        versions,
        [
            TemplateVersion { number: 1, default: true, image_id: Some("ami-8c1be5f6".into()) },
            TemplateVersion { number: 2, default: false, image_id: None },
        ]
    );
    let bad_number = DESCRIBE_LAUNCH_TEMPLATE_VERSIONS.replace("<versionNumber>2<", "<versionNumber>two<");
    let error = template_versions_of(&parse(&bad_number)).unwrap_err();
    assert!(matches!(&error, Error::Permanent { .. }), "{error}");
    assert!(error.to_string().contains("DescribeLaunchTemplateVersions: the versionNumber \"two\""), "{error}");
    let no_number = DESCRIBE_LAUNCH_TEMPLATE_VERSIONS.replace("<versionNumber>1</versionNumber>", "");
    let error = template_versions_of(&parse(&no_number)).unwrap_err();
    assert_eq!(error.to_string(), "DescribeLaunchTemplateVersions: the answer has no versionNumber");
    let none =
        "<DescribeLaunchTemplateVersionsResponse><launchTemplateVersionSet/></DescribeLaunchTemplateVersionsResponse>";
    assert!(template_versions_of(&parse(none)).unwrap().is_empty());
}

#[test]
fn a_created_version_is_read_by_its_number() {
    let created = r#"<CreateLaunchTemplateVersionResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
        <requestId>6657423a-2616-461a-9ce5-3c65example</requestId>
        <launchTemplateVersion>
            <createTime>2017-10-31T11:56:00.000Z</createTime>
            <createdBy>arn:aws:iam::123456789012:root</createdBy>
            <defaultVersion>false</defaultVersion>
            <launchTemplateData>
                <imageId>ami-aabbccdd</imageId>
                <instanceType>t2.micro</instanceType>
            </launchTemplateData>
            <launchTemplateId>lt-0a20c965061f64abc</launchTemplateId>
            <launchTemplateName>MyLaunchTemplate</launchTemplateName>
            <versionDescription>WebVersion2</versionDescription>
            <versionNumber>2</versionNumber>
        </launchTemplateVersion>
    </CreateLaunchTemplateVersionResponse>"#;
    assert_eq!(created_version_of(&parse(created)).unwrap(), 2);
    let error = created_version_of(&parse("<CreateLaunchTemplateVersionResponse/>")).unwrap_err();
    assert_eq!(error.to_string(), "CreateLaunchTemplateVersion: the answer has no launchTemplateVersion");
}
